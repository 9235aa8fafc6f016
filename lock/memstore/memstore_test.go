package memstore_test

import (
	"testing"

	"github.com/baton-dev/baton/lock"
	"github.com/baton-dev/baton/lock/memstore"
	"github.com/baton-dev/baton/lock/storetest"
)

// TestContract: without faults, the in-memory store keeps the contract the Cassandra store keeps
// (lock/cassandrastore runs the same tests on a real Cassandra).
func TestContract(t *testing.T) {
	s := memstore.New()
	seed := uint64(0)
	storetest.Run(t, func(t *testing.T) lock.Store {
		seed++
		return s.Client(seed, memstore.Faults{})
	})
}
