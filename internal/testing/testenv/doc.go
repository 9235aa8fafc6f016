// Package testenv gives test binaries shared real components: a local Cassandra cluster started
// at most once per test binary, on first use, and stopped by TestMain.
//
// Every test binary's Cassandra cluster comes from one table (CassandraConfig, clusters.go): a
// name and ports of its own per package, so test binaries that go test runs in parallel never
// share a port or a run directory. A test checks the table and that no test picks ports by hand.
//
// With CI=true a test whose component cannot be started fails; elsewhere it is skipped with a
// message saying how to get the component.
package testenv
