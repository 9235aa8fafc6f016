package testenv

import (
	"fmt"

	"github.com/baton-dev/baton/internal/testing/localcassandra"
)

// cassandraCluster is one row of the table of the Cassandra clusters that test binaries start.
type cassandraCluster struct {
	name        string // cluster name suffix and run directory suffix
	nodes       int    // 1 (Single's shape) or 3 (Trio's)
	nativePort  int
	storagePort int
	owner       string // the one package directory whose tests start it
}

// cassandraClusters is the one place where test binaries get Cassandra ports and names. Test
// binaries of different packages run in parallel (go test runs several at once) and every node
// of every cluster listens on 127.0.0.x, so two clusters must never share a port or a name: each
// row has ports of its own and belongs to one package. TestCassandraTableIsDisjoint checks the
// ports against each other and against localcassandra's presets (Single, Trio, Demo, which a
// developer may be running) and the reserved rows; TestCassandraNamesHaveOneOwner checks, in the
// source, that only a row's owner asks for it and that no test sets Cassandra ports by hand.
//
// The ports lie below Linux's ephemeral range (32768-60999), so no socket bound to port 0 ever
// takes one of them.
var cassandraClusters = []cassandraCluster{
	{"lctest-single", 1, 9242, 7200, "internal/testing/localcassandra"},
	{"lctest-trio", 3, 9342, 7300, "internal/testing/localcassandra"},
	{"cstore-single", 1, 9442, 7400, "lock/cassandrastore"},
	{"cstore-trio", 3, 9542, 7500, "lock/cassandrastore"},
	{"sidecar-single", 1, 9742, 7800, "test/sidecar"},
	{"cli-single", 1, 9842, 7900, "internal/cli"},
	{"operator-single", 1, 9942, 7950, "internal/operator"},
	{"compare-single", 1, 10042, 8050, "test/bench/compare"},
	{"storepool-single", 1, 10142, 8150, "internal/storepool"},
	{"e2e-single", 1, 10242, 8250, "test/e2e"},
	{"e2e-auth", 1, 10642, 8650, "test/e2e"},
	{"chaos-trio", 3, 10442, 8450, "test/chaos"},
	{"skew-single", 1, 10842, 8850, "test/skew"},
}

// reservedCassandraPorts are ports used outside test binaries, kept out of the table's way:
// hack/demo's node on the pod bridge (hack/demo/node.go).
var reservedCassandraPorts = []cassandraCluster{
	{"demo-node", 1, 10342, 8350, "hack/demo"},
}

// CassandraConfig returns the configuration of the test cluster called name in the table above:
// localcassandra.Single or Trio with the row's name and ports. Callers may change what does not
// identify the cluster (IPs, Authenticator, ExtraYAML, ...); they must not change Name or the ports.
// It panics on a name that has no row, which shows at the start of the test binary.
//
// What it does not guarantee: that the ports are free; localcassandra.Start checks that and
// fails with a clear message when something else (a cluster left behind) holds one.
func CassandraConfig(name string) localcassandra.Config {
	for _, c := range cassandraClusters {
		if c.name != name {
			continue
		}
		cfg := localcassandra.Single()
		if c.nodes == 3 {
			cfg = localcassandra.Trio()
		}
		cfg.Name, cfg.NativePort, cfg.StoragePort = c.name, c.nativePort, c.storagePort
		return cfg
	}
	panic(fmt.Sprintf("testenv: no Cassandra cluster %q in the table of internal/testing/testenv/clusters.go", name))
}
