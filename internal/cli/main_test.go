package cli

import (
	"os"
	"testing"

	"github.com/baton-dev/baton/internal/testing/localcassandra"
	"github.com/baton-dev/baton/internal/testing/testenv"
)

// single is the Cassandra of this test binary, on its own ports so that it runs beside the other
// packages' clusters. It starts on first use.
var single = testenv.NewCassandra(func() localcassandra.Config {
	c := localcassandra.Single()
	c.Name, c.NativePort, c.StoragePort = "cli-single", 9842, 7900
	return c
}())

func TestMain(m *testing.M) {
	code := m.Run()
	single.Stop()
	os.Exit(code)
}
