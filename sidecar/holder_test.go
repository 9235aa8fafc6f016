package sidecar

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-logr/logr"
	"go.uber.org/goleak"

	batonv1 "github.com/baton-dev/baton/api/v1"
	"github.com/baton-dev/baton/internal/testing/testclock"
	"github.com/baton-dev/baton/lock"
	"github.com/baton-dev/baton/lock/memstore"
	"github.com/baton-dev/baton/sidecarclient"
)

// testOptions returns valid options for pod name in mode.
func testOptions(t *testing.T, name string, mode batonv1.LockMode, locks ...string) Options {
	t.Helper()
	o, err := ParseOptions(nil, env(map[string]string{
		"POD_NAME": name, "POD_UID": "uid-" + name, "BATON_MODE": string(mode),
		"BATON_LOCK_IDS": strings.Join(locks, ","), "BATON_LEASE": "3s",
	}))
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func newTestHolder(t *testing.T, mem *memstore.Store, seed uint64, o Options) (*Holder, *memstore.Client) {
	t.Helper()
	client := mem.Client(seed, memstore.Faults{MinLatency: time.Millisecond, MaxLatency: 2 * time.Millisecond})
	h, err := NewHolder(o, client, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	return h, client
}

// next returns the next event or fails after a (virtual) minute.
func next(t *testing.T, events <-chan sidecarclient.Event) sidecarclient.Event {
	t.Helper()
	select {
	case e, ok := <-events:
		if !ok {
			t.Fatal("event stream ended")
		}
		return e
	case <-time.After(time.Minute):
		t.Fatal("no event within a minute")
	}
	return sidecarclient.Event{}
}

func TestHolderBlockingHandoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := memstore.New()
		ctx := context.Background()
		a, _ := newTestHolder(t, mem, 1, testOptions(t, "a", batonv1.ModeBlocking, "orders", "payments"))
		b, _ := newTestHolder(t, mem, 2, testOptions(t, "b", batonv1.ModeBlocking, "orders", "payments"))
		aEvents, stopA := a.Subscribe()
		defer stopA()
		bEvents, stopB := b.Subscribe()
		defer stopB()

		a.Start(ctx)
		for range 2 {
			if e := next(t, aEvents); e.Type != sidecarclient.EventAcquired {
				t.Fatalf("a: %+v", e)
			}
		}
		if !a.Ready() || !a.Started() {
			t.Fatal("a holds both locks but is not ready/started")
		}
		b.Start(ctx)
		time.Sleep(5 * time.Second)
		if b.Ready() || b.Started() {
			t.Fatal("b is ready while a holds the locks")
		}
		st, _ := b.Lock("orders")
		if st.State != sidecarclient.StateWaiting || st.QueuePosition != 1 || !strings.Contains(st.Reason, "position 1 for lock orders") ||
			st.Holder != "shop/a" {
			t.Fatalf("b's waiting status: %+v", st)
		}
		held, _ := a.Lock("orders")
		if held.State != sidecarclient.StateHeld || held.LeaseRemainingMs <= 0 || held.Holder != "shop/a" {
			t.Fatalf("a's status: %+v", held)
		}

		if err := a.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if e := next(t, aEvents); e.Type != sidecarclient.EventReleased {
				t.Fatalf("a after shutdown: %+v", e)
			}
		}
		if _, ok := <-aEvents; ok {
			t.Fatal("a's stream should end at shutdown")
		}
		tokens := map[string]int64{}
		for range 2 {
			e := next(t, bEvents)
			if e.Type != sidecarclient.EventAcquired {
				t.Fatalf("b: %+v", e)
			}
			tokens[e.LockID] = e.Token
		}
		if tokens["orders"] != held.Token+1 {
			t.Fatalf("b's token for orders %d, a had %d", tokens["orders"], held.Token)
		}
		if !b.Ready() || !b.Started() {
			t.Fatal("b holds both locks but is not ready")
		}
		_ = b.Shutdown(ctx)
	})
}

func TestHolderLossRequeues(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := memstore.New()
		ctx := context.Background()
		a, aStore := newTestHolder(t, mem, 1, testOptions(t, "a", batonv1.ModeBlocking, "orders"))
		b, _ := newTestHolder(t, mem, 2, testOptions(t, "b", batonv1.ModeBlocking, "orders"))
		events, stop := a.Subscribe()
		defer stop()
		a.Start(ctx)
		first := next(t, events)
		b.Start(ctx)
		aStore.Partition(10 * time.Second) // a cannot renew
		lost := next(t, events)
		if lost.Type != sidecarclient.EventLost || lost.Token != first.Token || !strings.Contains(lost.Reason, "expired") {
			t.Fatalf("want a lost notice for token %d, got %+v", first.Token, lost)
		}
		if a.Ready() {
			t.Fatal("a is ready after losing its lock")
		}
		// Started (GET /startupz) stays true, and nothing in the sidecar restarts or stops the
		// app: after a loss it only reports not ready and queues again (docs/concepts-and-safety.md,
		// "What the annotation alone does").
		if !a.Started() {
			t.Fatal("a counts as not started after losing its lock")
		}
		time.Sleep(5 * time.Second)
		st, _ := b.Lock("orders")
		if st.State != sidecarclient.StateHeld || st.Token <= first.Token {
			t.Fatalf("b should hold a newer token: %+v", st)
		}
		st, _ = a.Lock("orders")
		if st.State != sidecarclient.StateWaiting {
			t.Fatalf("a should queue again: %+v", st)
		}
		_ = b.Shutdown(ctx)
		_ = a.Shutdown(ctx)
	})
}

func TestHolderTryMode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := memstore.New()
		ctx := context.Background()
		a, _ := newTestHolder(t, mem, 1, testOptions(t, "a", batonv1.ModeTry, "orders"))
		b, _ := newTestHolder(t, mem, 2, testOptions(t, "b", batonv1.ModeTry, "orders"))
		a.Start(ctx)
		b.Start(ctx)
		if !a.Started() || a.Ready() {
			t.Fatal("try mode: started at once, not ready before acquiring")
		}
		st, err := a.Acquire(ctx, "orders", 0)
		if err != nil || st.State != sidecarclient.StateHeld || st.Token < 1 {
			t.Fatalf("try on a free lock: %+v %v", st, err)
		}
		firstToken := st.Token
		if again, err := a.Acquire(ctx, "orders", 0); !errors.Is(err, sidecarclient.ErrHeldByPod) || again.Token != st.Token {
			t.Fatalf("acquiring a lock the pod holds is refused (the grant is another request's): %+v %v", again, err)
		}
		if _, err := b.Acquire(ctx, "orders", 0); !errors.Is(err, sidecarclient.ErrLocked) {
			t.Fatalf("try on a held lock: %v", err)
		}
		start := time.Now()
		if _, err := b.Acquire(ctx, "orders", 2*time.Second); !errors.Is(err, sidecarclient.ErrLocked) || time.Since(start) < 2*time.Second {
			t.Fatalf("bounded wait on a held lock: %v after %v", err, time.Since(start))
		}
		got := make(chan sidecarclient.LockStatus, 1)
		go func() {
			st, err := b.Acquire(ctx, "orders", time.Minute)
			if err != nil {
				t.Error(err)
			}
			got <- st
		}()
		time.Sleep(time.Second)
		if st, err := a.Release(ctx, "orders", firstToken); err != nil || st.State != sidecarclient.StateIdle {
			t.Fatalf("release: %+v %v", st, err)
		}
		if st := <-got; st.Token != firstToken+1 {
			t.Fatalf("waiter got %+v", st)
		}
		if _, err := a.Release(ctx, "orders", 0); !errors.Is(err, sidecarclient.ErrNotHeld) {
			t.Fatalf("release when not held: %v", err)
		}
		if _, err := a.Acquire(ctx, "nope", 0); !errors.Is(err, sidecarclient.ErrUnknownLock) {
			t.Fatalf("unknown lock: %v", err)
		}
		blocking, _ := newTestHolder(t, mem, 3, testOptions(t, "c", batonv1.ModeBlocking, "orders"))
		if _, err := blocking.Acquire(ctx, "orders", 0); !errors.Is(err, sidecarclient.ErrNotTryMode) {
			t.Fatalf("acquire in blocking mode: %v", err)
		}
		_ = a.Shutdown(ctx)
		_ = b.Shutdown(ctx)
	})
}

// TestHolderShutdownStopsWaitingAcquire: a Try-mode acquisition still waiting when the sidecar
// shuts down ends at once with ErrShuttingDown, and the lock is not granted to the stopping pod
// later (issue 12: in a release storm, a sidecar that got SIGTERM during an acquire with a wait
// kept waiting until its shutdown timeout, won the lock, and exited holding it for a lease).
func TestHolderShutdownStopsWaitingAcquire(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := memstore.New()
		ctx := context.Background()
		a, _ := newTestHolder(t, mem, 1, testOptions(t, "a", batonv1.ModeTry, "orders"))
		b, _ := newTestHolder(t, mem, 2, testOptions(t, "b", batonv1.ModeTry, "orders"))
		a.Start(ctx)
		b.Start(ctx)
		if _, err := a.Acquire(ctx, "orders", 0); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			_, err := b.Acquire(ctx, "orders", time.Minute)
			done <- err
		}()
		time.Sleep(time.Second) // b is queued
		shutdown := time.Now()
		if err := b.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-done:
			if !errors.Is(err, sidecarclient.ErrShuttingDown) {
				t.Fatalf("the waiting acquire ended with %v, want ErrShuttingDown", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the waiting acquire went on after Shutdown returned")
		}
		if d := time.Since(shutdown); d > 3*time.Second {
			t.Errorf("shutdown took %v with an acquire waiting", d)
		}
		if _, err := b.Acquire(ctx, "orders", time.Minute); !errors.Is(err, sidecarclient.ErrShuttingDown) {
			t.Errorf("acquire after Shutdown: %v, want ErrShuttingDown", err)
		}
		if _, err := a.Release(ctx, "orders", 0); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Second)
		if st, err := lock.Inspect(ctx, mem.Client(3, memstore.Faults{}), b.opts.StoreLockID("orders")); err != nil || st.Record.Held() {
			t.Errorf("after the release, lock record %+v (%v): nobody should hold it", st.Record, err)
		}
		_ = a.Shutdown(ctx)
	})
}

// TestHolderNeverReportsHeldPastDeadline: the API downgrades a lock at its self-fence deadline,
// even before the lease's own loss notice has run.
func TestHolderNeverReportsHeldPastDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := memstore.New()
		ctx := context.Background()
		clk := &testclock.Ahead{}
		client := mem.Client(1, memstore.Faults{MinLatency: time.Millisecond, MaxLatency: 2 * time.Millisecond})
		h, err := NewHolder(testOptions(t, "a", batonv1.ModeBlocking, "orders"), client, logr.Discard(), lock.WithClock(clk))
		if err != nil {
			t.Fatal(err)
		}
		events, stop := h.Subscribe()
		defer stop()
		h.Start(ctx)
		defer h.Shutdown(ctx)
		if e := next(t, events); e.Type != sidecarclient.EventAcquired {
			t.Fatalf("%+v", e)
		}
		clk.Set(3 * time.Second) // the lease's deadline passed; its timer has not run
		st, _ := h.Lock("orders")
		if st.State == sidecarclient.StateHeld || st.LeaseRemainingMs != 0 {
			t.Fatalf("status past the self-fence deadline: %+v", st)
		}
		if locks := h.Locks(); locks[0].State == sidecarclient.StateHeld {
			t.Fatalf("Locks past the self-fence deadline: %+v", locks)
		}
		if h.Ready() {
			t.Fatal("ready past the self-fence deadline")
		}
	})
}

// TestHolderShutdownEndsItsGoroutines: once Shutdown returns, nothing a holder started is still
// running: hold loops (holding and waiting), leases in Blocking and Try mode, Try mode's lease
// watchers. It runs on real time, outside a synctest bubble, so that a goroutine left running fails
// the check instead of keeping synctest.Test waiting.
func TestHolderShutdownEndsItsGoroutines(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	mem := memstore.New()
	ctx := context.Background()
	holder := func(seed uint64, o Options) *Holder {
		h, err := NewHolder(o, mem.Client(seed, memstore.Faults{}), logr.Discard())
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	blocking := holder(1, testOptions(t, "a", batonv1.ModeBlocking, "orders", "payments"))
	waiter := holder(2, testOptions(t, "b", batonv1.ModeBlocking, "orders"))
	try := holder(3, testOptions(t, "c", batonv1.ModeTry, "reports"))
	events, stop := blocking.Subscribe()
	defer stop()

	blocking.Start(ctx)
	for range 2 {
		if e := next(t, events); e.Type != sidecarclient.EventAcquired {
			t.Fatalf("blocking holder: %+v", e)
		}
	}
	waiter.Start(ctx) // queues behind the blocking holder
	try.Start(ctx)
	if st, err := try.Acquire(ctx, "reports", 0); err != nil || st.State != sidecarclient.StateHeld {
		t.Fatalf("try mode: %+v, %v", st, err)
	}
	for _, h := range []*Holder{waiter, blocking, try} {
		if err := h.Shutdown(ctx); err != nil {
			t.Fatalf("shutdown of %s: %v", h.podName(), err)
		}
	}
}

// TestHolderYieldBlocking: a Blocking-mode holder that yields releases, and the waiter is granted
// before it; the yielder queues again behind it, is not ready meanwhile, and gets the lock back
// when the other yields in turn. Yield on a lock not held, an undeclared lock, or after Shutdown
// says so.
func TestHolderYieldBlocking(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := memstore.New()
		ctx := context.Background()
		a, _ := newTestHolder(t, mem, 1, testOptions(t, "a", batonv1.ModeBlocking, "orders"))
		b, _ := newTestHolder(t, mem, 2, testOptions(t, "b", batonv1.ModeBlocking, "orders"))
		aEvents, stopA := a.Subscribe()
		defer stopA()
		bEvents, stopB := b.Subscribe()
		defer stopB()
		a.Start(ctx)
		first := next(t, aEvents)
		b.Start(ctx)
		time.Sleep(2 * time.Second) // b is queued
		if _, err := b.Yield(ctx, "orders", 0, 0); !errors.Is(err, sidecarclient.ErrNotHeld) {
			t.Fatalf("yield by the waiter: %v, want ErrNotHeld", err)
		}
		if _, err := a.Yield(ctx, "nope", 0, 0); !errors.Is(err, sidecarclient.ErrUnknownLock) {
			t.Fatalf("yield of an undeclared lock: %v", err)
		}

		st, err := a.Yield(ctx, "orders", 0, 0)
		if err != nil || st.State != sidecarclient.StateWaiting || !strings.Contains(st.Reason, "yielded") {
			t.Fatalf("yield: %+v, %v; want waiting, yielded", st, err)
		}
		if e := next(t, aEvents); e.Type != sidecarclient.EventReleased || e.Token != first.Token {
			t.Fatalf("a after yielding: %+v", e)
		}
		if e := next(t, bEvents); e.Type != sidecarclient.EventAcquired || e.Token != first.Token+1 {
			t.Fatalf("b after a yielded: %+v, want the next token", e)
		}
		if a.Ready() {
			t.Fatal("a is ready after yielding")
		}
		time.Sleep(2 * time.Second)
		if st, _ := a.Lock("orders"); st.State != sidecarclient.StateWaiting || st.QueuePosition != 1 {
			t.Fatalf("a after yielding: %+v, want waiting at position 1", st)
		}

		if _, err := b.Yield(ctx, "orders", 0, 0); err != nil {
			t.Fatal(err)
		}
		if e := next(t, aEvents); e.Type != sidecarclient.EventAcquired || e.Token != first.Token+2 {
			t.Fatalf("a after b yielded: %+v", e)
		}
		_ = b.Shutdown(ctx)
		_ = a.Shutdown(ctx)
		if _, err := a.Yield(ctx, "orders", 0, 0); !errors.Is(err, sidecarclient.ErrShuttingDown) && !errors.Is(err, sidecarclient.ErrNotHeld) {
			t.Fatalf("yield after shutdown: %v", err)
		}
	})
}

// TestHolderYieldTry: a Try-mode holder that yields with a wait releases, the waiter is granted
// first, and the yielder gets the lock back once the waiter releases; with no wait and a waiter
// queued it ends idle (409 locked).
func TestHolderYieldTry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := memstore.New()
		ctx := context.Background()
		a, _ := newTestHolder(t, mem, 1, testOptions(t, "a", batonv1.ModeTry, "orders"))
		b, _ := newTestHolder(t, mem, 2, testOptions(t, "b", batonv1.ModeTry, "orders"))
		a.Start(ctx)
		b.Start(ctx)
		first, err := a.Acquire(ctx, "orders", 0)
		if err != nil {
			t.Fatal(err)
		}
		bGot := make(chan sidecarclient.LockStatus, 1)
		go func() {
			st, err := b.Acquire(ctx, "orders", time.Minute)
			if err != nil {
				t.Error(err)
			}
			bGot <- st
		}()
		time.Sleep(2 * time.Second) // b is queued
		aGot := make(chan sidecarclient.LockStatus, 1)
		go func() {
			st, err := a.Yield(ctx, "orders", 0, time.Minute)
			if err != nil {
				t.Error(err)
			}
			aGot <- st
		}()
		st := <-bGot
		if st.Token != first.Token+1 {
			t.Fatalf("b after a yielded: %+v", st)
		}
		time.Sleep(2 * time.Second)
		select {
		case st := <-aGot:
			t.Fatalf("a got the lock back while b holds it: %+v", st)
		default:
		}
		if _, err := b.Release(ctx, "orders", 0); err != nil {
			t.Fatal(err)
		}
		if st := <-aGot; st.State != sidecarclient.StateHeld || st.Token != first.Token+2 {
			t.Fatalf("a's yield answered %+v, want held with the next token", st)
		}

		// No wait, a waiter queued: the lock goes to the waiter and the yielder ends idle.
		go func() {
			st, err := b.Acquire(ctx, "orders", time.Minute)
			if err != nil {
				t.Error(err)
			}
			bGot <- st
		}()
		time.Sleep(2 * time.Second)
		if st, err := a.Yield(ctx, "orders", 0, 0); !errors.Is(err, sidecarclient.ErrLocked) || st.State == sidecarclient.StateHeld {
			t.Fatalf("yield without a wait: %+v, %v; want ErrLocked", st, err)
		}
		if st := <-bGot; st.Token != first.Token+3 {
			t.Fatalf("b after a's second yield: %+v", st)
		}
		_ = a.Shutdown(ctx)
		_ = b.Shutdown(ctx)
	})
}
