package localhint

import (
	"testing"

	"github.com/baton-dev/baton/lock"
)

func TestHinter(t *testing.T) {
	h := New()
	addr, hints, stop := h.Listen("x", "a")
	received := func() bool {
		select {
		case <-hints:
			return true
		default:
			return false
		}
	}
	h.Send(addr, lock.Hint{LockID: "y", Owner: "a", Kind: lock.HintFree})
	h.Send(addr, lock.Hint{LockID: "x", Owner: "b", Kind: lock.HintFree})
	h.Send(New().addr, lock.Hint{LockID: "x", Owner: "a", Kind: lock.HintFree})
	if received() {
		t.Fatal("received a hint for another lock, another waiter or another Hinter")
	}
	h.Send(addr, lock.Hint{LockID: "x", Owner: "a", Kind: lock.HintFree})
	h.Send(addr, lock.Hint{LockID: "x", Owner: "a", Kind: lock.HintAhead}) // never blocks
	if !received() {
		t.Fatal("not received")
	}
	// A second listener for the same waiter replaces the first; the first's stop leaves it alone.
	_, again, stopAgain := h.Listen("x", "a")
	stop()
	h.Send(addr, lock.Hint{LockID: "x", Owner: "a", Kind: lock.HintFree})
	select {
	case <-again:
	default:
		t.Fatal("the replacing listener got nothing")
	}
	// A probe comes back to the waiter it names as an echo while another waiter of the lock
	// listens here (the prober waits behind it), and not once that one has left.
	_, _, stopAhead := h.Listen("x", "b")
	h.Send(addr, lock.Hint{LockID: "x", Owner: "a", Enqueued: 7, Kind: lock.HintProbe})
	select {
	case got := <-again:
		if want := (lock.Hint{LockID: "x", Owner: "a", Enqueued: 7, Kind: lock.HintEcho}); got != want {
			t.Fatalf("answer to a probe: %+v, want %+v", got, want)
		}
	default:
		t.Fatal("no echo of the probe")
	}
	stopAhead()
	h.Send(addr, lock.Hint{LockID: "x", Owner: "a", Enqueued: 7, Kind: lock.HintProbe})
	select {
	case got := <-again:
		t.Fatalf("answer to a probe with nobody else waiting for the lock: %+v, want none", got)
	default:
	}
	stopAgain()
	if len(h.waiters) != 0 || len(h.listening) != 0 || h.Sent() != 8 {
		t.Fatalf("waiters left after stop: %v %v; sent %d, want 8", h.waiters, h.listening, h.Sent())
	}
}
