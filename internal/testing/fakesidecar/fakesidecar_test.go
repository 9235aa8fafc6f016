package fakesidecar

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/baton-dev/baton/sidecarclient"
)

func TestServedThroughTheRealHandler(t *testing.T) {
	f := &Service{T: t, Events: true}
	held := sidecarclient.LockStatus{LockID: "orders", State: sidecarclient.StateHeld, Token: 7}
	f.SetLocks(held)
	c := sidecarclient.New(Serve(t, f))

	ls, err := c.Locks(t.Context())
	if err != nil || len(ls) != 1 || ls[0].Token != 7 {
		t.Fatalf("Locks = %v, %v; want [orders held 7]", ls, err)
	}
	f.SetLocks() // while served
	if _, err := c.Lock(t.Context(), "orders"); !errors.Is(err, sidecarclient.ErrUnknownLock) {
		t.Fatalf("Lock after SetLocks() = %v, want ErrUnknownLock", err)
	}

	events, _, err := c.Subscribe(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	f.WaitSubscribed(1)
	f.Push(sidecarclient.Event{Type: sidecarclient.EventAcquired, LockID: "orders", Token: 8})
	select {
	case ev := <-events:
		if ev.Type != sidecarclient.EventAcquired || ev.Token != 8 {
			t.Errorf("event %+v, want acquired 8", ev)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no event within 10s")
	}
	// The handler may call Locks more than once (a 404 lists the declared locks); the calls the
	// client made must all be recorded, with their lock IDs.
	for _, want := range []string{"Locks", "Lock orders", "Subscribe"} {
		if !slices.Contains(f.Calls(), want) {
			t.Errorf("Calls = %q, missing %q", f.Calls(), want)
		}
	}
}
