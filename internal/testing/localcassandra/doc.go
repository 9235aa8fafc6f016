// Package localcassandra installs and runs real Apache Cassandra 5.0 clusters
// on the local machine for tests, demos and CI — without Docker and without
// Cassandra's tarball or its bin/cassandra launch scripts.
//
// # Install
//
// [Install] fetches org.apache.cassandra:cassandra-all:<Version> and all of its
// runtime dependencies from Maven Central with the machine's Maven (`mvn`),
// into a versioned cache directory:
//
//	${XDG_CACHE_HOME:-$HOME/.cache}/baton/cassandra/<version>/lib/*.jar
//
// A stamp file (.installed) is written only after every jar is in place, so an
// interrupted install is redone on the next call and a finished one is a
// no-op. Concurrent installs are serialised with a file lock. mvn prints
// nothing while it downloads, so Install prints a line each minute, gives an
// attempt up after 10 minutes and tries again (3 attempts). A JDK 17+ `java`
// (JAVA_HOME/bin/java or the one on PATH) and `mvn` are required.
//
// # Running nodes
//
// [Start] does what Cassandra's launcher normally does: it writes a minimal
// cassandra.yaml and logback.xml per node and runs
// org.apache.cassandra.service.CassandraDaemon directly on the JVM with the
// flags of conf/jvm-server.options and conf/jvm17-server.options (add-opens,
// add-exports, netty properties, jamm java agent), a small heap, and the
// system properties that make a fresh test cluster start fast
// (skip_wait_for_gossip_to_settle=0, a short ring delay,
// superuser_setup_delay_ms=0). JMX is not started (no cassandra.jmx.*.port
// property), so several nodes and clusters can share one machine. The JIT
// stops at C1 (Config.FullJIT turns C2 on), and nodes map a class data
// sharing archive that the first cleanly stopped node of the machine wrote
// into the cache (cds.go): about two CPU seconds less per node start.
//
// Nodes of one cluster share a port and differ by loopback address
// (127.0.0.1, 127.0.0.2, ...; on Linux the whole 127.0.0.0/8 range is usable
// without setup). Two presets exist and can run at the same time:
//
//	Single(): 1 node  127.0.0.1            CQL 9042, storage 7000
//	Trio():   3 nodes 127.0.0.1 .. .3      CQL 9142, storage 7100
//
// All nodes start in parallel with auto_bootstrap: false (the cluster is new
// and empty). Start returns once every node answers CQL and, for more than one
// node, every node sees every other one as UP (a CL=ALL read of an RF=N system
// keyspace coordinated by each node succeeds).
//
// State lives under Config.RunDir (default os.TempDir()/baton-cassandra-<name>):
// one directory per node with data, commitlog, hints, caches, logs
// (logs/system.log at INFO, console.log with WARN and above plus JVM output)
// and a pid file. Start first kills nodes of the same cluster left behind by a
// crashed earlier run (found through those pid files) and wipes the state.
//
// With Config.DieWithParent the JVMs get SIGKILL when the Go process dies
// (Pdeathsig), which is what tests want; without it they run in their own
// session and survive the caller, which is what the hack/cassandra CLI uses to
// leave a cluster running in the background ([Teardown] and [Status] work on
// such a cluster from another process through the pid files).
package localcassandra
