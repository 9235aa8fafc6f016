package sidecarapi

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/baton-dev/baton/sidecarclient"
)

// fakeService is an in-memory Service for tests. Each method calls the matching function field;
// a call whose field is nil fails the test, so a test states every call it expects.
type fakeService struct {
	t *testing.T

	locks     func() []sidecarclient.LockStatus
	lock      func(lockID string) (sidecarclient.LockStatus, bool)
	acquire   func(ctx context.Context, lockID string, wait time.Duration) (sidecarclient.LockStatus, error)
	release   func(ctx context.Context, lockID string, token int64) (sidecarclient.LockStatus, error)
	yield     func(ctx context.Context, lockID string, token int64, wait time.Duration) (sidecarclient.LockStatus, error)
	subscribe func() (<-chan sidecarclient.Event, func())
	healthy   func(ctx context.Context) error
	ready     func() bool
	started   func() bool

	mu    sync.Mutex
	calls []string
}

var _ Service = (*fakeService)(nil)

func (f *fakeService) record(call string, fn any) bool {
	f.mu.Lock()
	f.calls = append(f.calls, call)
	f.mu.Unlock()
	if fn == nil {
		f.t.Errorf("unexpected call to fakeService.%s", call)
		return false
	}
	return true
}

// Calls returns the names of the methods called so far.
func (f *fakeService) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

func (f *fakeService) Locks() []sidecarclient.LockStatus {
	if !f.record("Locks", f.locks) {
		return nil
	}
	return f.locks()
}

func (f *fakeService) Lock(lockID string) (sidecarclient.LockStatus, bool) {
	if !f.record("Lock", f.lock) {
		return sidecarclient.LockStatus{}, false
	}
	return f.lock(lockID)
}

func (f *fakeService) Acquire(ctx context.Context, lockID string, wait time.Duration) (sidecarclient.LockStatus, error) {
	if !f.record("Acquire", f.acquire) {
		return sidecarclient.LockStatus{}, sidecarclient.ErrUnknownLock
	}
	return f.acquire(ctx, lockID, wait)
}

func (f *fakeService) Yield(ctx context.Context, lockID string, token int64, wait time.Duration) (sidecarclient.LockStatus, error) {
	if !f.record("Yield", f.yield) {
		return sidecarclient.LockStatus{}, sidecarclient.ErrUnknownLock
	}
	return f.yield(ctx, lockID, token, wait)
}

func (f *fakeService) Release(ctx context.Context, lockID string, token int64) (sidecarclient.LockStatus, error) {
	if !f.record("Release", f.release) {
		return sidecarclient.LockStatus{}, sidecarclient.ErrUnknownLock
	}
	return f.release(ctx, lockID, token)
}

func (f *fakeService) Subscribe() (<-chan sidecarclient.Event, func()) {
	if !f.record("Subscribe", f.subscribe) {
		ch := make(chan sidecarclient.Event)
		close(ch)
		return ch, func() {}
	}
	return f.subscribe()
}

func (f *fakeService) Healthy(ctx context.Context) error {
	if !f.record("Healthy", f.healthy) {
		return nil
	}
	return f.healthy(ctx)
}

func (f *fakeService) Ready() bool {
	if !f.record("Ready", f.ready) {
		return false
	}
	return f.ready()
}

func (f *fakeService) Started() bool {
	if !f.record("Started", f.started) {
		return false
	}
	return f.started()
}

// declaredLocks is the lock inventory most tests use.
func declaredLocks() []sidecarclient.LockStatus {
	return []sidecarclient.LockStatus{
		{LockID: "a", State: sidecarclient.StateHeld, Token: 7, Holder: "ns/me", LeaseRemainingMs: 9000},
		{LockID: "b", State: sidecarclient.StateWaiting, Holder: "ns/other", QueuePosition: 2, Reason: "held by ns/other"},
		{LockID: "c", State: sidecarclient.StateIdle},
	}
}

// withDeclared makes f know declaredLocks for Locks and Lock.
func withDeclared(f *fakeService) {
	f.locks = declaredLocks
	f.lock = func(id string) (sidecarclient.LockStatus, bool) {
		for _, st := range declaredLocks() {
			if st.LockID == id {
				return st, true
			}
		}
		return sidecarclient.LockStatus{}, false
	}
}
