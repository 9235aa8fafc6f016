package storepool

import (
	"testing"

	"github.com/baton-dev/baton/internal/testing/testenv"
)

// cassandra is the node of this test binary, on ports of its own so that it runs beside any other.
var cassandra = testenv.NewCassandra(testenv.CassandraConfig("storepool-single"))

// TestMain fails the run if goroutines of the pool (its connecting goroutines) or of the sessions
// it opened (gocql's connections, control connection and event handling) outlive the tests.
func TestMain(m *testing.M) {
	testenv.VerifyTestMain(m, cassandra.Stop)
}
