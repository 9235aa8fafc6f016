package chaos

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/testing/fencedstore"
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

// TestCheckFaultWindows: a grant that begins while quorum is lost (past the slack for answers in
// flight) is an anomaly, and so is a hold lost while a fault left quorum in place; a grant
// within the slack, a hold released in such a fault, and a loss outside it are not.
func TestCheckFaultWindows(t *testing.T) {
	h := History{
		Holds: []Hold{
			{Process: "a", Lock: "orders", Token: 1, Start: at(0), End: at(1200), EndedBy: "lost"},        // self-fenced without quorum
			{Process: "b", Lock: "orders", Token: 2, Start: at(1300), End: at(5000), EndedBy: "released"}, // within the slack
			{Process: "c", Lock: "orders", Token: 3, Start: at(5100), End: at(9000), EndedBy: "lost"},     // after the node fault
		},
		Faults: []Window{
			{Name: "quorum-loss", Start: at(1000), End: at(3000), NoGrants: true},
			{Name: "node-pause", Start: at(4000), End: at(8000), KeepHolds: true},
		},
		End: at(10000),
	}
	if got := checkFaultWindows(h); len(got) != 0 {
		t.Fatalf("a clean history: %v", got)
	}
	h.Holds[1].Start = at(1000).Add(GrantSlack + time.Millisecond)
	h.Holds[2].End = at(7999)
	var kinds []string
	for _, a := range checkFaultWindows(h) {
		kinds = append(kinds, a.Kind)
	}
	if want := []string{"grant-without-quorum", "lost-with-quorum"}; !slices.Equal(kinds, want) {
		t.Errorf("found %v, want %v", kinds, want)
	}
}

// TestMeasure: a hand-off counts from a release that another process waited for to the next
// grant; a failover from a fault that took the grant (a kill, or a release while the fault
// lasted) to the next grant; a release nobody waited for and a fault that leaves quorum in place
// count for neither.
func TestMeasure(t *testing.T) {
	h := History{
		Holds: []Hold{
			{Process: "a", Lock: "l", Token: 1, Start: at(0), End: at(1000), EndedBy: "released"},
			{Process: "b", Lock: "l", Token: 2, Start: at(1010), End: at(2000), EndedBy: EndKilled},
			{Process: "c", Lock: "l", Token: 3, Start: at(5000), End: at(6000), EndedBy: "released"}, // nobody waiting
			{Process: "a", Lock: "l", Token: 4, Start: at(9000), End: at(9500), EndedBy: "released"}, // kept through a node fault
			{Process: "b", Lock: "l", Token: 5, Start: at(9600)},
		},
		Waits: []Wait{
			{Process: "b", Start: at(500), End: at(1010)},
			{Process: "c", Start: at(1500), End: at(5000)},
			{Process: "b", Start: at(9100), End: at(9600)},
		},
		Faults: []Window{
			{Name: "kill b", Start: at(2000), End: at(3000), Token: 2},
			{Name: "pause c", Start: at(5500), End: at(8000), Token: 3}, // c let go while paused
			{Name: "node-pause", Start: at(9100), End: at(9300), Token: 4, KeepHolds: true},
		},
		End: at(10000),
	}
	got := Measure(h)
	if want := []time.Duration{10 * time.Millisecond, 100 * time.Millisecond}; !slices.Equal(got.Handoffs, want) {
		t.Errorf("hand-offs %v, want %v", got.Handoffs, want)
	}
	if want := []time.Duration{3 * time.Second, 3500 * time.Millisecond}; !slices.Equal(got.Failovers, want) {
		t.Errorf("failovers %v, want %v", got.Failovers, want)
	}
	if q := Quantile([]time.Duration{4, 1, 3, 2}, 0.5); q != 2 {
		t.Errorf("median of 1..4: %v, want 2 (nearest rank)", q)
	}
	if q := Quantile(nil, 0.99); q != 0 {
		t.Errorf("quantile of nothing: %v", q)
	}
}

// TestCheckLateWrites: a write of a process with its token that reached the resource later than
// LateSlack after that hold's deadline is an anomaly; one within the slack, one of a process stopped
// at its deadline, and one of a hold without a deadline are not.
func TestCheckLateWrites(t *testing.T) {
	late := func(ms int) fencedstore.Record {
		r := write(1, "a", 5, false)
		r.Time = at(ms)
		return r
	}
	h := History{
		Holds: []Hold{
			{Process: "a", Lock: "l", Token: 5, Start: at(0), End: at(900), Deadline: at(1000), EndedBy: "lost"},
			{Process: "b", Lock: "l", Token: 6, Start: at(1100), End: at(2000)},
		},
		Writes: map[string][]fencedstore.Record{"l": {late(1000 + int(LateSlack/time.Millisecond))}},
	}
	if got := checkLateWrites(h); len(got) != 0 {
		t.Fatalf("a write within the slack: %v", got)
	}
	h.Writes["l"] = append(h.Writes["l"], late(1100))
	if got := checkLateWrites(h); len(got) != 1 || got[0].Kind != "late-write" {
		t.Fatalf("a write 100 ms after the deadline: %v", got)
	}
	h.Faults = []Window{{Name: "pause a", Start: at(500), End: at(2000), Paused: "a"}}
	if got := checkLateWrites(h); len(got) != 0 {
		t.Fatalf("a stopped at its deadline: %v", got)
	}
	h.Faults = nil
	h.Holds[0].Deadline = time.Time{}
	if got := checkLateWrites(h); len(got) != 0 {
		t.Fatalf("no deadline: %v", got)
	}
}
