package main_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/testing/testenv"
	"github.com/baton-dev/baton/sidecarclient"
)

// TestSidecarsYield: a Blocking-mode holder that steps down (POST /v1/locks/{id}/yield) releases
// at once, the sidecar waiting behind it is granted, and the yielder queues again behind it: it is
// not ready until the other yields in turn, and then takes the lock back (issue 13).
func TestSidecarsYield(t *testing.T) {
	ns := fmt.Sprintf("e2e-%d", time.Now().UnixNano())
	a := startSidecar(t, ns, "a")
	onlyHolder(t, []*sidecarProc{a}, 10*time.Second)
	b := startSidecar(t, ns, "b")
	testenv.WaitFor(t, "b to queue", 10*time.Second, func() bool {
		st, err := b.client.Lock(context.Background(), "orders")
		return err == nil && st.State == sidecarclient.StateWaiting && st.QueuePosition == 1
	})
	aEvents, bEvents := events(t, a), events(t, b)
	time.Sleep(200 * time.Millisecond) // let the streams connect
	held, err := a.client.Lock(context.Background(), "orders")
	if err != nil {
		t.Fatal(err)
	}

	yieldAt := time.Now()
	st, err := a.client.Yield(context.Background(), "orders", held.Token, 0)
	if err != nil || st.State != sidecarclient.StateWaiting || !strings.Contains(st.Reason, "yielded") {
		t.Fatalf("yield: %+v, %v; want waiting after yielding", st, err)
	}
	if e := nextEvent(t, aEvents, 5*time.Second); e.Type != sidecarclient.EventReleased || e.Token != held.Token {
		t.Fatalf("a after yielding: %+v", e)
	}
	e := nextEvent(t, bEvents, 5*time.Second)
	if e.Type != sidecarclient.EventAcquired || e.Token <= held.Token {
		t.Fatalf("b after a yielded: %+v", e)
	}
	t.Logf("b granted token %d %v after a yielded", e.Token, time.Since(yieldAt).Round(time.Millisecond))
	if got := onlyHolder(t, []*sidecarProc{a, b}, 5*time.Second); got != b {
		t.Fatalf("%s is ready after a yielded to b", got.name)
	}
	testenv.WaitFor(t, "a to queue behind b", 10*time.Second, func() bool {
		st, err := a.client.Lock(context.Background(), "orders")
		return err == nil && st.State == sidecarclient.StateWaiting && st.QueuePosition == 1
	})

	if _, err := b.client.Yield(context.Background(), "orders", e.Token, 0); err != nil {
		t.Fatal(err)
	}
	if e2 := nextEvent(t, aEvents, 5*time.Second); e2.Type != sidecarclient.EventAcquired || e2.Token <= e.Token {
		t.Fatalf("a after b yielded: %+v", e2)
	}
	if _, err := b.client.Yield(context.Background(), "orders", 0, 0); err == nil || !strings.Contains(err.Error(), "not held") {
		t.Fatalf("yield by a waiter: %v, want not held", err)
	}
}
