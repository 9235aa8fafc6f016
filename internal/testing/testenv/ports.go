package testenv

import (
	"testing"

	"github.com/baton-dev/baton/internal/testing/freeport"
)

// FreePort returns a port on 127.0.0.1, free for TCP and UDP, that no other process taking its
// ports from package freeport (every test binary and rig of baton) is handed while this test
// binary runs. It fails the test when none is left.
//
// What it does not guarantee: that a program outside baton does not bind it first.
func FreePort(t testing.TB) int {
	t.Helper()
	p, err := freeport.Port("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	return p
}
