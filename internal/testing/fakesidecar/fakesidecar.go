// Package fakesidecar is an in-memory sidecar for tests of what talks to one (the baton CLI, the
// demo app): a sidecarapi.Service whose every method calls a function the test sets, served by
// the sidecar's real API handler and server on a unix socket.
//
// What it does not do: hold locks, time leases or order a queue. It answers what the test says;
// a call the test did not set up fails the test. The sidecar API's own tests (internal/sidecarapi)
// keep a fake inside that package, which this one cannot replace without an import cycle.
package fakesidecar

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/sidecarapi"
	"github.com/baton-dev/baton/sidecarclient"
)

// Service is a sidecarapi.Service for tests. Each method calls the matching On* field; a call
// whose field is nil fails the test, so a test states every call it expects. Subscribe is allowed
// only with Events set; Push and EndStream drive the subscribers. Healthy, Ready and Started are
// never expected.
type Service struct {
	T testing.TB

	OnLocks   func() []sidecarclient.LockStatus
	OnLock    func(lockID string) (sidecarclient.LockStatus, bool)
	OnAcquire func(ctx context.Context, lockID string, wait time.Duration) (sidecarclient.LockStatus, error)
	OnRelease func(ctx context.Context, lockID string, token int64) (sidecarclient.LockStatus, error)
	OnYield   func(ctx context.Context, lockID string, token int64, wait time.Duration) (sidecarclient.LockStatus, error)
	Events    bool

	mu         sync.Mutex
	listed     bool // SetLocks was called: Locks and Lock answer from locks when their On* is nil
	locks      []sidecarclient.LockStatus
	calls      []string
	subs       map[int]chan sidecarclient.Event
	next       int
	subscribed chan struct{} // closed and replaced at each new subscription
}

var _ sidecarapi.Service = (*Service)(nil)

func (f *Service) record(call string, ok bool) bool {
	f.mu.Lock()
	f.calls = append(f.calls, call)
	f.mu.Unlock()
	if !ok {
		f.T.Errorf("unexpected call to the fake sidecar: %s", call)
	}
	return ok
}

// Calls returns the methods called so far, with their lock ID where they take one.
func (f *Service) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

// Locks implements sidecarapi.Service: OnLocks, or else the list of SetLocks.
func (f *Service) Locks() []sidecarclient.LockStatus {
	listed, ls := f.list()
	if f.OnLocks == nil && listed {
		f.record("Locks", true)
		return ls
	}
	if !f.record("Locks", f.OnLocks != nil) {
		return nil
	}
	return f.OnLocks()
}

// Lock implements sidecarapi.Service: OnLock, or else the list of SetLocks.
func (f *Service) Lock(lockID string) (sidecarclient.LockStatus, bool) {
	listed, ls := f.list()
	if f.OnLock == nil && listed {
		f.record("Lock "+lockID, true)
		for _, l := range ls {
			if l.LockID == lockID {
				return l, true
			}
		}
		return sidecarclient.LockStatus{}, false
	}
	if !f.record("Lock "+lockID, f.OnLock != nil) {
		return sidecarclient.LockStatus{}, false
	}
	return f.OnLock(lockID)
}

// SetLocks makes Locks and Lock (where OnLocks and OnLock are nil) answer from ls until the next
// SetLocks. Unlike StaticLocks it may be called while the fake is served.
func (f *Service) SetLocks(ls ...sidecarclient.LockStatus) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.listed, f.locks = true, append([]sidecarclient.LockStatus(nil), ls...)
}

func (f *Service) list() (bool, []sidecarclient.LockStatus) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.listed, append([]sidecarclient.LockStatus(nil), f.locks...)
}

// Acquire implements sidecarapi.Service.
func (f *Service) Acquire(ctx context.Context, lockID string, wait time.Duration) (sidecarclient.LockStatus, error) {
	if !f.record("Acquire "+lockID, f.OnAcquire != nil) {
		return sidecarclient.LockStatus{}, sidecarclient.ErrUnknownLock
	}
	return f.OnAcquire(ctx, lockID, wait)
}

// Yield implements sidecarapi.Service.
func (f *Service) Yield(ctx context.Context, lockID string, token int64, wait time.Duration) (sidecarclient.LockStatus, error) {
	if !f.record("Yield "+lockID, f.OnYield != nil) {
		return sidecarclient.LockStatus{}, sidecarclient.ErrUnknownLock
	}
	return f.OnYield(ctx, lockID, token, wait)
}

// Release implements sidecarapi.Service.
func (f *Service) Release(ctx context.Context, lockID string, token int64) (sidecarclient.LockStatus, error) {
	if !f.record("Release "+lockID, f.OnRelease != nil) {
		return sidecarclient.LockStatus{}, sidecarclient.ErrUnknownLock
	}
	return f.OnRelease(ctx, lockID, token)
}

// Subscribe implements sidecarapi.Service: a subscription that Push and EndStream drive.
func (f *Service) Subscribe() (<-chan sidecarclient.Event, func()) {
	ch := make(chan sidecarclient.Event, 16)
	if !f.record("Subscribe", f.Events) {
		close(ch)
		return ch, func() {}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.subs == nil {
		f.subs = map[int]chan sidecarclient.Event{}
	}
	id := f.next
	f.next++
	f.subs[id] = ch
	if f.subscribed != nil {
		close(f.subscribed)
		f.subscribed = nil
	}
	return ch, func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		if c, ok := f.subs[id]; ok {
			delete(f.subs, id)
			close(c)
		}
	}
}

// Healthy implements sidecarapi.Service; a call fails the test.
func (f *Service) Healthy(context.Context) error {
	f.record("Healthy", false)
	return errors.New("unexpected")
}

// Ready implements sidecarapi.Service; a call fails the test.
func (f *Service) Ready() bool { f.record("Ready", false); return false }

// Started implements sidecarapi.Service; a call fails the test.
func (f *Service) Started() bool { f.record("Started", false); return false }

// WaitSubscribed waits until n event subscriptions are open, failing the test after 10 seconds.
func (f *Service) WaitSubscribed(n int) {
	f.T.Helper()
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	for {
		f.mu.Lock()
		open := len(f.subs)
		if f.subscribed == nil {
			f.subscribed = make(chan struct{})
		}
		next := f.subscribed
		f.mu.Unlock()
		if open >= n {
			return
		}
		select {
		case <-next:
		case <-deadline.C:
			f.T.Fatalf("timed out after 10s waiting for %d event subscriptions (%d open)", n, open)
		}
	}
}

// Push sends ev (with the time now if it has none) to every subscriber.
func (f *Service) Push(ev sidecarclient.Event) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if ev.Time.IsZero() {
		ev.Time = time.Now()
	}
	for _, ch := range f.subs {
		ch <- ev // buffered; tests push a few events only
	}
}

// EndStream ends every subscription, as a sidecar that shuts down does.
func (f *Service) EndStream() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for id, ch := range f.subs {
		delete(f.subs, id)
		close(ch)
	}
}

// StaticLocks makes Locks and Lock answer from a fixed list. Call it before serving.
func (f *Service) StaticLocks(ls ...sidecarclient.LockStatus) {
	f.OnLocks = func() []sidecarclient.LockStatus { return append([]sidecarclient.LockStatus(nil), ls...) }
	f.OnLock = func(id string) (sidecarclient.LockStatus, bool) {
		for _, l := range ls {
			if l.LockID == id {
				return l, true
			}
		}
		return sidecarclient.LockStatus{}, false
	}
}

// Serve serves svc's API on a unix socket until the test ends and returns the socket path.
func Serve(t testing.TB, svc sidecarapi.Service) string {
	t.Helper()
	return ServeWrapped(t, svc, nil)
}

// ServeWrapped is Serve with the API handler wrapped by wrap (nil: none), e.g. to answer one
// route as an older sidecar did.
func ServeWrapped(t testing.TB, svc sidecarapi.Service, wrap func(http.Handler) http.Handler) string {
	t.Helper()
	dir := t.TempDir()
	if len(dir) > 80 { // unix socket paths are limited to about 108 bytes
		var err error
		if dir, err = os.MkdirTemp("", "baton-fakesidecar"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
	}
	path := filepath.Join(dir, "baton.sock")
	h, err := sidecarapi.NewHandler(svc)
	if err != nil {
		t.Fatal(err)
	}
	if wrap != nil {
		h = wrap(h)
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	// The sidecar's own server, with its timeouts and connection limit.
	srv, err := sidecarapi.NewServer(h)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(ln)
	}()
	t.Cleanup(func() {
		_ = srv.Close()
		<-served
	})
	return path
}
