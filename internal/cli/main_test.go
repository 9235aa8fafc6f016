package cli

import (
	"os"
	"testing"

	"github.com/baton-dev/baton/internal/testing/testenv"
)

// single is the Cassandra of this test binary, on its own ports so that it runs beside the other
// packages' clusters. It starts on first use.
var single = testenv.NewCassandra(testenv.CassandraConfig("cli-single"))

func TestMain(m *testing.M) {
	code := m.Run()
	single.Stop()
	os.Exit(code)
}
