package hintudp_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/testing/testenv"
	"github.com/baton-dev/baton/lock"
	"github.com/baton-dev/baton/lock/hintudp"
	"github.com/baton-dev/baton/lock/memstore"
)

func newHinter(t *testing.T, ctx context.Context) *hintudp.Hinter {
	t.Helper()
	// Several "processes" on one host, each on loopback: the development setup AllowLoopback is for.
	h, err := hintudp.New(ctx, hintudp.Config{Bind: "127.0.0.1:0", AllowLoopback: true})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestDelivery(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a, b := newHinter(t, ctx), newHinter(t, ctx)
	addr, hints, stop := b.Listen("orders", "b#1")
	defer stop()
	if addr != b.Addr() || !strings.HasPrefix(addr, "127.0.0.1:") {
		t.Fatalf("Listen returned address %q, Addr %q", addr, b.Addr())
	}
	want := lock.Hint{LockID: "orders", Owner: "b#1", Enqueued: 42, Kind: lock.HintFree, Token: 7, Version: 9}
	a.Send("127.0.0.1:1", want)                                                                 // nobody listens there: lost, not an error
	a.Send(addr, lock.Hint{LockID: "billing", Owner: "b#1", Enqueued: 1, Kind: lock.HintAhead}) // no waiter for it
	a.Send("b.example:9465", want)                                                              // not an IP literal: never resolved
	a.Send("0.0.0.0:9465", want)
	a.Send(addr, want)
	select {
	case got := <-hints:
		if got != want {
			t.Fatalf("received %+v, want %+v", got, want)
		}
	case <-time.After(time.Minute):
		t.Fatal("no hint within a minute")
	}
	// A datagram that is not a hint is counted and dropped.
	conn, err := net.Dial("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("GET / HTTP/1.1")); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, "malformed datagram counted", time.Minute, func() bool { return b.Stats().Malformed == 1 })
	if s := a.Stats(); s.Sent != 3 || s.SendFailed != 2 {
		t.Errorf("sender stats %+v, want 3 sent and 2 failed", s)
	}
	if s := b.Stats(); s.Delivered != 1 || s.NobodyWaiting != 1 {
		t.Errorf("receiver stats %+v, want 1 delivered and 1 for nobody", s)
	}
}

func TestConfigErrors(t *testing.T) {
	ctx := context.Background()
	for _, cfg := range []hintudp.Config{
		{},
		{Bind: "localhost:9465"},
		{Bind: ":9465"},     // every address, nothing to advertise
		{Bind: "0.0.0.0:0"}, //
		{Bind: "127.0.0.1:0", Advertise: "pod:9465"},
		{Bind: "127.0.0.1:0", Advertise: "0.0.0.0:9465"},
		{Bind: "127.0.0.1:0", Advertise: "198.18.0.7:0"},
		{Bind: "127.0.0.1:0", Advertise: "224.0.0.1:9465"},
	} {
		if h, err := hintudp.New(ctx, cfg); err == nil {
			t.Errorf("New(%+v) = %v, want an error", cfg, h.Addr())
		}
	}
	for _, cfg := range []hintudp.Config{
		{Bind: "127.0.0.1:0"},
		{Bind: "[::1]:0"},
		{Bind: "0.0.0.0:0", Advertise: "127.0.0.5:9465"},
		{Bind: "0.0.0.0:0", Advertise: "[::ffff:127.0.0.1]:9465"},
	} {
		if h, err := hintudp.New(ctx, cfg); !errors.Is(err, hintudp.ErrLoopback) {
			t.Errorf("New(%+v) without AllowLoopback = %v, %v; want hintudp.ErrLoopback", cfg, h, err)
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	h, err := hintudp.New(ctx, hintudp.Config{Bind: "0.0.0.0:0", Advertise: "198.18.0.7:9465"})
	if err != nil || h.Addr() != "198.18.0.7:9465" {
		t.Fatalf("New with an advertised address: %v, %v", h, err)
	}
}

// TestHandOffBetweenProcesses: Lockers that each have a Hinter of their own, as sidecar processes
// do, hand a lock down a chain of waiters through UDP hints. Their polls are 30 s apart, so a
// chain that completes within that time was moved by hints alone.
func TestHandOffBetweenProcesses(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	mem := memstore.New()
	const n = 4
	var hinters []*hintudp.Hinter
	var lockers []*lock.Locker
	for i := range n {
		h := newHinter(t, ctx)
		l, err := lock.New(mem.Client(uint64(i+1), memstore.Faults{}), lock.Owner{Identity: fmt.Sprintf("p%d", i), Incarnation: "1"},
			lock.WithHinter(h), lock.WithLease(90*time.Second), lock.WithPollInterval(30*time.Second),
			lock.WithWaiterPollInterval(30*time.Second), lock.WithQueueEntryTTL(90*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		hinters, lockers = append(hinters, h), append(lockers, l)
	}
	holder, err := lockers[0].Acquire(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 1; i < n; i++ {
		wg.Go(func() {
			lease, err := lockers[i].Acquire(ctx, "orders")
			if err != nil {
				errs <- err
				return
			}
			errs <- lease.Release(ctx)
		})
		testenv.WaitFor(t, "waiter queued", time.Minute, func() bool {
			q, _ := mem.Client(99, memstore.Faults{}).Queue(ctx, "orders", 0, 10)
			return len(q) == i
		})
	}
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if took := time.Since(start); took >= 30*time.Second {
		t.Fatalf("the chain took %v: at least one hand-off waited for a poll", took)
	}
	for i, h := range hinters[1:] {
		if s := h.Stats(); s.Delivered == 0 {
			t.Errorf("waiter %d received no hint: %+v", i+1, s)
		}
	}
	if errors.Is(ctx.Err(), context.Canceled) {
		t.Fatal("cancelled early")
	}
}

// TestProbeEcho: a probe to a Hinter comes back as an echo to the waiter that sent it while
// another waiter of that lock listens at the probed Hinter (the prober waits behind it), and is no
// hint there (nothing delivered, nothing malformed); once nobody else waits for the lock there, a
// probe is left unanswered and counted, so that a prober whose waiter ahead left goes deaf and
// polls. A pod's Hinter (without AllowLoopback) answers no probe from a loopback address, where its
// echo would reach a UDP service of its own host: counted, not answered.
func TestProbeEcho(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a, b := newHinter(t, ctx), newHinter(t, ctx)
	_, echoes, stop := a.Listen("orders", "a#1")
	defer stop()
	_, _, stopAhead := b.Listen("orders", "b#1")
	a.Send(b.Addr(), lock.Hint{LockID: "orders", Owner: "a#1", Enqueued: 42, Kind: lock.HintProbe})
	want := lock.Hint{LockID: "orders", Owner: "a#1", Enqueued: 42, Kind: lock.HintEcho}
	select {
	case got := <-echoes:
		if got != want {
			t.Fatalf("received %+v, want the echo %+v", got, want)
		}
	case <-time.After(time.Minute):
		t.Fatal("no echo within a minute")
	}
	// The echo may arrive before its sender has counted it as sent.
	testenv.WaitFor(t, "echo counted as sent", time.Minute, func() bool { return b.Stats().Sent == 1 })
	if s := b.Stats(); s.Probes != 1 || s.Echoed != 1 || s.Sent != 1 || s.Delivered != 0 || s.NobodyWaiting != 0 || s.Malformed != 0 {
		t.Errorf("probed Hinter's stats %+v, want 1 probe answered with 1 datagram sent, nothing delivered", s)
	}
	if s := a.Stats(); s.Delivered != 1 {
		t.Errorf("prober's stats %+v, want the echo delivered", s)
	}

	stopAhead() // b's waiter was granted, or gave up
	a.Send(b.Addr(), lock.Hint{LockID: "orders", Owner: "a#1", Enqueued: 42, Kind: lock.HintProbe})
	testenv.WaitFor(t, "second probe counted", time.Minute, func() bool { return b.Stats().Probes == 2 })
	if s := b.Stats(); s.Echoed != 1 || s.NotWaiting != 1 || s.Sent != 1 {
		t.Errorf("probed Hinter's stats %+v after its waiter left: want the second probe unanswered (NotWaiting)", s)
	}
	select {
	case got := <-echoes:
		t.Errorf("received %+v after the waiter ahead left: want no echo", got)
	case <-time.After(200 * time.Millisecond):
	}

	port := testenv.FreePort(t)
	pod, err := hintudp.New(ctx, hintudp.Config{Bind: fmt.Sprintf("127.0.0.1:%d", port), Advertise: "198.18.0.7:9465"})
	if err != nil {
		t.Fatal(err)
	}
	_, _, stopPod := pod.Listen("orders", "pod#1")
	defer stopPod()
	conn, err := net.Dial("udp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write(hintudp.AppendHint(nil, lock.Hint{LockID: "orders", Owner: "evil#1", Enqueued: 1, Kind: lock.HintProbe})); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, "probe from loopback counted", time.Minute, func() bool { return pod.Stats().Probes == 1 })
	if s := pod.Stats(); s.Echoed != 0 || s.Refused != 1 || s.Sent != 0 || s.SendFailed != 0 {
		t.Errorf("stats %+v after a probe from loopback: want it unanswered", s)
	}
	_ = conn.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	buf := make([]byte, hintudp.MaxDatagram+1)
	if n, err := conn.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("the loopback sender received %q (%v): an echo reached loopback", buf[:n], err)
	}
}
