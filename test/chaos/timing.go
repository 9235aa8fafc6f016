package chaos

import (
	"math"
	"slices"
	"time"
)

// Timings are how fast a run's lock changed hands.
type Timings struct {
	// Handoffs: from a release while another process waited to the next grant (releases while
	// a fault lasts are left out).
	Handoffs []time.Duration
	// Failovers: from a fault that took a grant (its hold ended while the fault lasted: lost,
	// killed, exited or let go) to the next grant with a larger token. Faults that leave quorum in
	// place (Window.KeepHolds) take no grant.
	Failovers []time.Duration
}

// Add appends o's samples to t's.
func (t *Timings) Add(o Timings) {
	t.Handoffs = append(t.Handoffs, o.Handoffs...)
	t.Failovers = append(t.Failovers, o.Failovers...)
}

// Measure takes a history's hand-off and failover times.
func Measure(h History) Timings {
	var t Timings
	next := func(lockID string, after time.Time, token int64) (time.Time, bool) {
		var first time.Time
		for _, hd := range h.Holds {
			if hd.Lock == lockID && hd.Token > token && !hd.Start.Before(after) && (first.IsZero() || hd.Start.Before(first)) {
				first = hd.Start
			}
		}
		return first, !first.IsZero()
	}
	for _, hd := range h.Holds {
		if hd.EndedBy != "released" && hd.EndedBy != EndApp {
			continue
		}
		inFault := slices.ContainsFunc(h.Faults, func(f Window) bool { return !hd.End.Before(f.Start) && !hd.End.After(f.End) })
		if inFault {
			continue // a release the fault caused (a SIGTERM): its next grant waits for the fault
		}
		waited := slices.ContainsFunc(h.Waits, func(w Wait) bool {
			return w.Process != hd.Process && w.Start.Before(hd.End) && w.End.After(hd.End)
		})
		if at, ok := next(hd.Lock, hd.End, hd.Token); waited && ok {
			t.Handoffs = append(t.Handoffs, at.Sub(hd.End))
		}
	}
	victim := map[int64]Hold{}
	for _, hd := range h.Holds {
		victim[hd.Token] = hd
	}
	for _, f := range h.Faults {
		hd, ok := victim[f.Token]
		if f.Token == 0 || f.KeepHolds || !ok || hd.End.IsZero() || hd.End.Before(f.Start) || hd.End.After(f.End) {
			continue // the fault did not take the grant: it was kept, or it ended after the fault
		}
		if at, ok := next(hd.Lock, f.Start, f.Token); ok {
			t.Failovers = append(t.Failovers, at.Sub(f.Start))
		}
	}
	return t
}

// Quantile returns the q-quantile (0 to 1) of ds, nearest rank; 0 for none.
func Quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[min(max(i, 0), len(s)-1)]
}
