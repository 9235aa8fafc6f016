package sidecar

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/baton-dev/baton/internal/sidecarapi"
	"github.com/baton-dev/baton/sidecarclient"
)

// Reasons of the baton.dev/lock-held condition before the holder runs.
const (
	// ReasonWaitingForStore: the sidecar has not reached its lock store yet (Cassandra does not
	// answer, or the keyspace lacks baton's schema); the message says which, with the last failure.
	ReasonWaitingForStore = "WaitingForStore"
	// ReasonStoreRefused: the sidecar gave up on its lock store for a reason that retrying cannot
	// fix (refused login, another cluster, an unsafe Cassandra version) and exits; the message says
	// why and what to do.
	ReasonStoreRefused = "StoreRefused"
)

// maxWaitingMessage bounds the message of what the sidecar waits for, which goes to the pod's
// condition and to every API answer while it starts; a driver error naming many hosts can be long.
const maxWaitingMessage = 1024

// startup is the sidecar's API service and gate source from its first moment: until the holder
// runs it answers every request with what the sidecar waits for (sidecarapi.Starter) and gives the
// gate that as the pod's condition; then it hands both over to the holder. It implements
// sidecarapi.Service and sidecarapi.Starter.
//
// What it does not guarantee: a request that arrives while the holder is being handed over may
// still get the starting answer; the holder is set once and never taken back.
type startup struct {
	mu      sync.Mutex
	reason  string
	waiting string
	holder  *Holder
	changes chan struct{} // signalled (without blocking) on each change before and at the hand-over
}

// newStartup returns a startup that waits for what (a message such as "connecting to Cassandra at
// ...").
func newStartup(what string) *startup {
	return &startup{reason: ReasonWaitingForStore, waiting: what, changes: make(chan struct{}, 1)}
}

// waitFor records what the sidecar waits for now (msg) or, with reason ReasonStoreRefused, why it
// gave up.
func (s *startup) waitFor(reason, msg string) {
	if len(msg) > maxWaitingMessage {
		msg = strings.ToValidUTF8(msg[:maxWaitingMessage], "") + "..."
	}
	s.mu.Lock()
	s.reason, s.waiting = reason, msg
	s.mu.Unlock()
	s.signal()
}

// serve hands the API and the gate over to h. The hand-over is signalled on both channels: a gate
// busy writing the previous state when it happens next waits on the holder's.
func (s *startup) serve(h *Holder) {
	s.mu.Lock()
	s.holder = h
	s.mu.Unlock()
	s.signal()
	h.mu.Lock()
	h.signalLocked()
	h.mu.Unlock()
}

func (s *startup) signal() {
	select {
	case s.changes <- struct{}{}:
	default:
	}
}

// started returns the holder once it runs, else nil.
func (s *startup) started() *Holder {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.holder
}

// Starting returns what the sidecar waits for, nil once the holder serves.
func (s *startup) Starting() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.holder != nil {
		return nil
	}
	return errors.New(s.waiting)
}

// GateState is the holder's once it runs; before, the sidecar is not holding, and says why.
func (s *startup) GateState() GateState {
	if h := s.started(); h != nil {
		return h.GateState()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return GateState{Reason: s.reason, Message: s.waiting}
}

// Changes signals a change: startup's own until the holder runs, the holder's afterwards. The
// hand-over itself is signalled on startup's, so a gate waiting there wakes and reads the holder.
func (s *startup) Changes() <-chan struct{} {
	if h := s.started(); h != nil {
		return h.Changes()
	}
	return s.changes
}

// errNotStarted answers a Service call that came before the holder runs; the handler asks
// Starting first, so it is only reached by a caller that skipped that.
func (s *startup) errNotStarted() error {
	return errors.Join(sidecarclient.ErrStarting, s.Starting())
}

func (s *startup) Locks() []sidecarclient.LockStatus {
	if h := s.started(); h != nil {
		return h.Locks()
	}
	return nil
}

func (s *startup) Lock(lockID string) (sidecarclient.LockStatus, bool) {
	if h := s.started(); h != nil {
		return h.Lock(lockID)
	}
	return sidecarclient.LockStatus{}, false
}

func (s *startup) Acquire(ctx context.Context, lockID string, wait time.Duration) (sidecarclient.LockStatus, error) {
	if h := s.started(); h != nil {
		return h.Acquire(ctx, lockID, wait)
	}
	return sidecarclient.LockStatus{}, s.errNotStarted()
}

func (s *startup) Release(ctx context.Context, lockID string, token int64) (sidecarclient.LockStatus, error) {
	if h := s.started(); h != nil {
		return h.Release(ctx, lockID, token)
	}
	return sidecarclient.LockStatus{}, s.errNotStarted()
}

func (s *startup) Yield(ctx context.Context, lockID string, token int64, wait time.Duration) (sidecarclient.LockStatus, error) {
	if h := s.started(); h != nil {
		return h.Yield(ctx, lockID, token, wait)
	}
	return sidecarclient.LockStatus{}, s.errNotStarted()
}

func (s *startup) Subscribe() (<-chan sidecarclient.Event, func()) {
	if h := s.started(); h != nil {
		return h.Subscribe()
	}
	ch := make(chan sidecarclient.Event)
	close(ch)
	return ch, func() {}
}

func (s *startup) Healthy(ctx context.Context) error {
	if h := s.started(); h != nil {
		return h.Healthy(ctx)
	}
	return s.errNotStarted()
}

func (s *startup) Ready() bool {
	if h := s.started(); h != nil {
		return h.Ready()
	}
	return false
}

func (s *startup) Started() bool {
	if h := s.started(); h != nil {
		return h.Started()
	}
	return false
}

var (
	_ sidecarapi.Service = (*startup)(nil)
	_ sidecarapi.Starter = (*startup)(nil)
)
