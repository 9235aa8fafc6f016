// Package compare measures baton's queue lock side by side with the baselines of docs/design.md (Targets), in one
// run, on the same Cassandra node and (for client-go) the same API server: the original lock's old
// algorithm (package oldalgo), a plain LWT lock without queue (package lwtlock), baton's queue lock
// (package lock on cassandrastore, with and without an in-process hand-off hint) and client-go's
// tools/leaderelection on a coordination.k8s.io Lease.
//
// It measures uncontended acquire latency against one LWT round trip, handoff after a graceful
// release, failover after the holder is killed, acquire+release throughput from 1 to 64
// contenders and fairness (Jain's index) with 16 contenders, and renders one Markdown table per
// metric. Every contender is a goroutine of the measuring process with its own lock client; the
// tests of this package start the real components and run it (see docs/benchmarks.md, "Side by
// side", and `make bench`).
//
// Nothing here is for production: the baselines are deliberately the algorithms baton replaces.
// The throughput runs count overlapping grants as a cheap safety check, not as a proof.
package compare
