package sidecarapi

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run if goroutines (event streams, handlers, servers, client readers) outlive
// the tests. net/http lingers half a second on a connection whose request headers were too large
// (it reads what the client still sends before closing), whatever the server does.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("net/http.(*conn).closeWriteAndWait"))
}
