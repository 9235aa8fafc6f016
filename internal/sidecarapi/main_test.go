package sidecarapi

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run if goroutines (event streams, handlers, servers, client readers) outlive
// the tests.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
