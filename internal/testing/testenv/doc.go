// Package testenv gives test binaries shared real components: a local Cassandra cluster started
// at most once per test binary, on first use, and stopped by TestMain.
//
// With CI=true a test whose component cannot be started fails; elsewhere it is skipped with a
// message saying how to get the component.
package testenv
