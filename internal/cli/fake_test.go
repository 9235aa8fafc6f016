package cli

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/utils/clock"

	"github.com/baton-dev/baton/internal/sidecarapi"
	"github.com/baton-dev/baton/internal/testing/testenv"
	"github.com/baton-dev/baton/sidecarclient"
)

// fakeService is an in-memory sidecar (sidecarapi.Service) for tests. Each method calls the matching
// function field; a call whose field is nil fails the test, so a test states every call it
// expects. Subscribe is allowed only with events set; push and endStream drive the subscribers.
type fakeService struct {
	t *testing.T

	locks   func() []sidecarclient.LockStatus
	lock    func(lockID string) (sidecarclient.LockStatus, bool)
	acquire func(ctx context.Context, lockID string, wait time.Duration) (sidecarclient.LockStatus, error)
	release func(ctx context.Context, lockID string, token int64) (sidecarclient.LockStatus, error)
	yield   func(ctx context.Context, lockID string, token int64, wait time.Duration) (sidecarclient.LockStatus, error)
	events  bool

	mu    sync.Mutex
	calls []string
	subs  map[int]chan sidecarclient.Event
	next  int
}

var _ sidecarapi.Service = (*fakeService)(nil)

func (f *fakeService) record(call string, ok bool) bool {
	f.mu.Lock()
	f.calls = append(f.calls, call)
	f.mu.Unlock()
	if !ok {
		f.t.Errorf("unexpected call to fakeService.%s", call)
	}
	return ok
}

// Calls returns the methods called so far, with their lock ID where they take one.
func (f *fakeService) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

func (f *fakeService) Locks() []sidecarclient.LockStatus {
	if !f.record("Locks", f.locks != nil) {
		return nil
	}
	return f.locks()
}

func (f *fakeService) Lock(lockID string) (sidecarclient.LockStatus, bool) {
	if !f.record("Lock "+lockID, f.lock != nil) {
		return sidecarclient.LockStatus{}, false
	}
	return f.lock(lockID)
}

func (f *fakeService) Acquire(ctx context.Context, lockID string, wait time.Duration) (sidecarclient.LockStatus, error) {
	if !f.record("Acquire "+lockID, f.acquire != nil) {
		return sidecarclient.LockStatus{}, sidecarclient.ErrUnknownLock
	}
	return f.acquire(ctx, lockID, wait)
}

func (f *fakeService) Yield(ctx context.Context, lockID string, token int64, wait time.Duration) (sidecarclient.LockStatus, error) {
	if !f.record("Yield "+lockID, f.yield != nil) {
		return sidecarclient.LockStatus{}, sidecarclient.ErrUnknownLock
	}
	return f.yield(ctx, lockID, token, wait)
}

func (f *fakeService) Release(ctx context.Context, lockID string, token int64) (sidecarclient.LockStatus, error) {
	if !f.record("Release "+lockID, f.release != nil) {
		return sidecarclient.LockStatus{}, sidecarclient.ErrUnknownLock
	}
	return f.release(ctx, lockID, token)
}

func (f *fakeService) Subscribe() (<-chan sidecarclient.Event, func()) {
	ch := make(chan sidecarclient.Event, 16)
	if !f.record("Subscribe", f.events) {
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
	return ch, func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		if c, ok := f.subs[id]; ok {
			delete(f.subs, id)
			close(c)
		}
	}
}

func (f *fakeService) Healthy(context.Context) error {
	f.record("Healthy", false)
	return errors.New("unexpected")
}

func (f *fakeService) Ready() bool   { f.record("Ready", false); return false }
func (f *fakeService) Started() bool { f.record("Started", false); return false }

// subscribers returns how many event subscriptions are open.
func (f *fakeService) subscribers() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.subs)
}

// waitSubscribed waits until n event subscriptions are open.
func (f *fakeService) waitSubscribed(n int) {
	f.t.Helper()
	testenv.WaitFor(f.t, "event subscriptions to open", 10*time.Second, func() bool { return f.subscribers() >= n })
}

// push sends ev to every subscriber.
func (f *fakeService) push(ev sidecarclient.Event) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if ev.Time.IsZero() {
		ev.Time = time.Now()
	}
	for _, ch := range f.subs {
		ch <- ev // buffered; tests push a few events only
	}
}

// endStream ends every subscription, as a sidecar that shuts down does.
func (f *fakeService) endStream() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for id, ch := range f.subs {
		delete(f.subs, id)
		close(ch)
	}
}

// staticLocks makes Locks and Lock answer from a fixed list.
func (f *fakeService) staticLocks(ls ...sidecarclient.LockStatus) {
	f.locks = func() []sidecarclient.LockStatus { return append([]sidecarclient.LockStatus(nil), ls...) }
	f.lock = func(id string) (sidecarclient.LockStatus, bool) {
		for _, l := range ls {
			if l.LockID == id {
				return l, true
			}
		}
		return sidecarclient.LockStatus{}, false
	}
}

// serve serves svc's API on a unix socket until the test ends and returns the socket path.
func serve(t *testing.T, svc sidecarapi.Service) string {
	t.Helper()
	return serveWrapped(t, svc, nil)
}

// serveWrapped is serve with the API handler wrapped by wrap (nil: none), e.g. to answer one
// route as an older sidecar did.
func serveWrapped(t *testing.T, svc sidecarapi.Service, wrap func(http.Handler) http.Handler) string {
	t.Helper()
	dir := t.TempDir()
	if len(dir) > 80 { // unix socket paths are limited to about 108 bytes
		var err error
		if dir, err = os.MkdirTemp("", "baton-cli"); err != nil {
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

// invocation is one run of the CLI in a test.
type invocation struct {
	args  []string
	env   map[string]string
	stdin io.Reader
	sigs  <-chan os.Signal
	poll  time.Duration // 0: an hour, so only events drive the sidecar commands
	pid   int
	clock clock.WithDelayedExecution // nil: the system's suspend-aware clock

	stdout, stderr testenv.SyncBuffer
	code           int
	done           chan struct{}
}

// start runs the CLI in the background.
func start(t *testing.T, inv *invocation) *invocation {
	t.Helper()
	env := func(k string) string { return inv.env[k] }
	p := newProgram(env, inv.stdin, &inv.stdout, &inv.stderr)
	p.poll = inv.poll
	if p.poll == 0 {
		p.poll = time.Hour
	}
	if inv.pid != 0 {
		p.pid = inv.pid
	}
	if inv.clock != nil {
		p.clock = inv.clock
	}
	ctx, cancel := context.WithCancel(context.Background())
	inv.done = make(chan struct{})
	go func() {
		defer close(inv.done)
		inv.code = p.main(ctx, inv.sigs, inv.args)
	}()
	t.Cleanup(func() {
		cancel()
		<-inv.done
	})
	return inv
}

// wait waits for the CLI to exit and returns its exit code.
func (inv *invocation) wait(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-inv.done:
		return inv.code
	case <-time.After(timeout):
		t.Fatalf("baton %s did not exit within %v\nstdout: %s\nstderr: %s", strings.Join(inv.args, " "),
			timeout, inv.stdout.String(), inv.stderr.String())
		return -1
	}
}

// runCLI runs the CLI to completion.
func runCLI(t *testing.T, inv *invocation) *invocation {
	t.Helper()
	start(t, inv).wait(t, time.Minute)
	return inv
}
