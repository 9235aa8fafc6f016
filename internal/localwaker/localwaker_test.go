package localwaker

import "testing"

func TestWaker(t *testing.T) {
	w := New()
	ch, cancel := w.Subscribe("x")
	w.Notify("y")
	select {
	case <-ch:
		t.Fatal("woken by another lock")
	default:
	}
	w.Notify("x")
	w.Notify("x") // never blocks
	select {
	case <-ch:
	default:
		t.Fatal("not woken")
	}
	cancel()
	w.Notify("x")
	if len(w.subs) != 0 {
		t.Fatalf("subscribers left after cancel: %v", w.subs)
	}
}
