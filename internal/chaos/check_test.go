package chaos

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/fencedstore"
)

var t0 = time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

func write(seq int64, writer string, token int64, accepted bool) fencedstore.Record {
	return fencedstore.Record{Write: fencedstore.Write{Token: token, Writer: writer}, Seq: seq, Accepted: accepted}
}

// TestCheck: each kind of anomaly is found in a history that has it, and only there; a clean
// history of hand-overs, a pause the fenced resource caught and a kill has none.
func TestCheck(t *testing.T) {
	clean := History{
		Holds: []Hold{
			{Process: "a", Lock: "orders", Token: 10, Start: at(0), End: at(1000)},
			{Process: "b", Lock: "orders", Token: 11, Start: at(1005), End: at(4000)}, // a was paused, b took over
			{Process: "b", Lock: "orders", Token: 11, Start: at(1005), End: at(4000)}, // the same grant reported twice
			{Process: "c", Lock: "orders", Token: 12, Start: at(7000), End: at(9000)}, // b was killed at 4000
			{Process: "a", Lock: "orders", Token: 13, Start: at(9010)},                // still held at the end
			{Process: "a", Lock: "payments", Token: 3, Start: at(0), End: at(500)},
			{Process: "b", Lock: "payments", Token: 4, Start: at(600)}, // below orders' tokens: each lock has its own
		},
		Writes: map[string][]fencedstore.Record{"orders": {
			write(1, "a", 10, true), write(2, "b", 11, true), write(3, "a", 10, false), // a's write after its pause: rejected
			write(4, "b", 11, true), write(5, "c", 12, true),
		}},
		Faults: []Window{{Name: "pause a", Start: at(100), End: at(3000)}, {Name: "kill b", Start: at(4000), End: at(6000)}},
		End:    at(12000),
	}
	if got := Check(clean, CheckOptions{Regrant: 3 * time.Second}); len(got) != 0 {
		t.Fatalf("a clean history: %v", got)
	}

	for _, tc := range []struct {
		kind   string
		change func(h *History)
	}{
		{"overlap", func(h *History) { h.Holds[1].Start = at(999) }},
		{"overlap", func(h *History) { h.Holds[3].End = time.Time{}; h.Holds[4].Start = at(11000) }},
		{"token-order", func(h *History) { h.Holds[3].Token = 9 }},
		{"token-reuse", func(h *History) { h.Holds[6].Token = 3 }},
		{"stale-write", func(h *History) { h.Writes["orders"][2].Accepted = true }},
		{"shared-token", func(h *History) { h.Writes["orders"] = append(h.Writes["orders"], write(6, "b", 12, true)) }},
		{"liveness", func(h *History) { h.Holds = slices.Delete(h.Holds, 3, 5) }},
	} {
		h := clean
		h.Holds = slices.Clone(clean.Holds)
		h.Writes = map[string][]fencedstore.Record{"orders": slices.Clone(clean.Writes["orders"])}
		tc.change(&h)
		got := Check(h, CheckOptions{Regrant: 3 * time.Second})
		kinds := map[string]bool{}
		for _, a := range got {
			kinds[a.Kind] = true
		}
		if !kinds[tc.kind] {
			t.Errorf("a history with a %s: found %v", tc.kind, got)
		}
		for _, a := range got {
			if a.Detail == "" || !strings.Contains(a.String(), a.Kind) {
				t.Errorf("anomaly without a description: %+v", a)
			}
		}
	}
	// Without a bound, a lock left ungranted after the faults is not judged.
	h := clean
	h.Holds = slices.Delete(slices.Clone(clean.Holds), 3, 5)
	if got := Check(h, CheckOptions{}); len(got) != 0 {
		t.Errorf("no regrant bound: %v", got)
	}
}
