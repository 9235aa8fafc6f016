package chaos

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/baton-dev/baton/internal/testing/fencedstore"
)

// Hold is one process's grant of one lock, as the process reported it.
type Hold struct {
	Process string
	Lock    string
	Token   int64
	Start   time.Time // the acquired report
	// End is when the hold stopped being valid: the lost or released report, or when the nemesis
	// killed the process. Zero while the process still reports it held when the run ends.
	End time.Time
	// Deadline, when known (baton run reports it), is the lease's deadline: the process's command
	// must be gone by then, so no write of its with Token may reach the resource after it.
	Deadline time.Time
	// EndedBy says what dated End: "lost" or "released" (the sidecar's report), EndKilled,
	// EndExited or EndApp.
	EndedBy string
}

// How a hold ended, besides the sidecar's own "lost" and "released" reports.
const (
	EndKilled = "killed" // the nemesis killed the process: it can act no more
	EndExited = "exited" // the process exited still holding by its reports: it can act no more
	EndApp    = "app"    // the app stopped using the lock and released it, and no report came
)

// Wait is a span in which a process asked for the lock and was not granted it yet.
type Wait struct {
	Process    string
	Start, End time.Time
}

// Window is a fault from its injection to its healing.
type Window struct {
	Name       string
	Start, End time.Time
	// Token is the grant the fault hit (0: none), to time the failover from it.
	Token int64
	// NoGrants: nothing may be granted while the fault lasts (no quorum). KeepHolds: no hold may
	// be lost while it lasts (quorum stays).
	NoGrants, KeepHolds bool
	// Paused names the process the fault stopped (SIGSTOP), if any: a stopped baton run cannot
	// stop its command by the deadline, and only fencing protects the resource then.
	Paused string
}

// LateSlack is how long after a hold's deadline a write sent before it may still reach the
// resource.
const LateSlack = 50 * time.Millisecond

// GrantSlack is how long after a loss of quorum a grant may still be reported: the answer to a
// request that completed before it may arrive after.
const GrantSlack = 500 * time.Millisecond

// History is what a run produced.
type History struct {
	Holds []Hold
	// Waits are the spans in which processes waited for a grant (the cycle workload's acquires).
	Waits []Wait
	// Writes are the fenced resource's records per lock, in the order the resource judged them.
	Writes map[string][]fencedstore.Record
	// Faults are the nemesis's faults, healed by their End.
	Faults []Window
	// End is when the run stopped; open holds last until then.
	End time.Time
}

// Anomaly is one broken promise found in a history.
type Anomaly struct {
	// Kind is one of Check's "overlap", "token-order", "token-reuse", "stale-write",
	// "shared-token", "liveness", "grant-without-quorum", "lost-with-quorum", "late-write", or a
	// run's own "api" (an answer to a malformed request that is not a JSON error), "revocation" (a
	// revoked holder that did not learn it), "exit-holding" (a sidecar that exited after SIGTERM
	// without reporting its lock released), "growth" (goroutines or memory of a sidecar).
	Kind   string
	Detail string
}

func (a Anomaly) String() string { return a.Kind + ": " + a.Detail }

// CheckOptions bounds what Check accepts.
type CheckOptions struct {
	// Regrant is how soon after the last fault healed every lock that was granted in the run must
	// be granted again (0: not checked).
	Regrant time.Duration
}

// Check returns every anomaly in h, in a stable order.
func Check(h History, opts CheckOptions) []Anomaly {
	var out []Anomaly
	byLock := map[string][]Hold{}
	for _, hd := range h.Holds {
		byLock[hd.Lock] = append(byLock[hd.Lock], hd)
	}
	for _, lockID := range sortedKeys(byLock) {
		out = append(out, checkHolds(lockID, byLock[lockID], h.End)...)
	}
	for _, lockID := range sortedKeys(h.Writes) {
		out = append(out, checkWrites(lockID, h.Writes[lockID])...)
	}
	if opts.Regrant > 0 {
		out = append(out, checkRegrant(h, byLock, opts.Regrant)...)
	}
	out = append(out, checkFaultWindows(h)...)
	return append(out, checkLateWrites(h)...)
}

// checkLateWrites checks that no write of a process with a token reached the resource after that
// hold's deadline (when the hold has one, and the process was not stopped at the deadline).
func checkLateWrites(h History) []Anomaly {
	var out []Anomaly
	for _, hd := range h.Holds {
		stopped := slices.ContainsFunc(h.Faults, func(f Window) bool {
			return f.Paused == hd.Process && !hd.Deadline.Before(f.Start) && !hd.Deadline.After(f.End)
		})
		if hd.Deadline.IsZero() || stopped {
			continue
		}
		for _, w := range h.Writes[hd.Lock] {
			if w.Writer == hd.Process && w.Token == hd.Token && w.Time.After(hd.Deadline.Add(LateSlack)) {
				out = append(out, Anomaly{"late-write", fmt.Sprintf("lock %s: %s wrote with token %d at %s, %v after its lease's deadline %s (accepted: %v)",
					hd.Lock, hd.Process, hd.Token, stamp(w.Time), w.Time.Sub(hd.Deadline), stamp(hd.Deadline), w.Accepted)})
				break
			}
		}
	}
	return out
}

// checkFaultWindows checks that no grant began while quorum was lost, and that no hold was lost
// while a fault left quorum in place.
func checkFaultWindows(h History) []Anomaly {
	var out []Anomaly
	for _, f := range h.Faults {
		for _, hd := range h.Holds {
			if f.NoGrants && hd.Start.After(f.Start.Add(GrantSlack)) && hd.Start.Before(f.End) {
				out = append(out, Anomaly{"grant-without-quorum", fmt.Sprintf("lock %s: %s got token %d at %s, during %s (%s to %s)",
					hd.Lock, hd.Process, hd.Token, stamp(hd.Start), f.Name, stamp(f.Start), stamp(f.End))})
			}
			if f.KeepHolds && hd.EndedBy == "lost" && !hd.End.Before(f.Start) && !hd.End.After(f.End) {
				out = append(out, Anomaly{"lost-with-quorum", fmt.Sprintf("lock %s: %s lost token %d at %s, during %s (%s to %s)",
					hd.Lock, hd.Process, hd.Token, stamp(hd.End), f.Name, stamp(f.Start), stamp(f.End))})
			}
		}
	}
	return out
}

// checkHolds checks one lock's holds: no two overlap, tokens grow in grant order, and no token is
// granted twice.
func checkHolds(lockID string, holds []Hold, runEnd time.Time) []Anomaly {
	var out []Anomaly
	holds = slices.Clone(holds)
	slices.SortStableFunc(holds, func(a, b Hold) int { return a.Start.Compare(b.Start) })
	end := func(hd Hold) time.Time {
		if hd.End.IsZero() {
			return runEnd
		}
		return hd.End
	}
	owner := map[int64]string{}
	for i, hd := range holds {
		if p, ok := owner[hd.Token]; ok && p != hd.Process {
			out = append(out, Anomaly{"token-reuse", fmt.Sprintf("lock %s: token %d granted to %s and to %s", lockID, hd.Token, p, hd.Process)})
		}
		owner[hd.Token] = hd.Process
		for _, earlier := range holds[:i] {
			if earlier.Process == hd.Process && earlier.Token == hd.Token {
				continue // the same grant reported twice
			}
			if hd.Start.Before(end(earlier)) {
				out = append(out, Anomaly{"overlap", fmt.Sprintf("lock %s: %s held token %d from %s to %s, %s took token %d at %s, %v before that ended",
					lockID, earlier.Process, earlier.Token, stamp(earlier.Start), stamp(end(earlier)), hd.Process, hd.Token, stamp(hd.Start),
					end(earlier).Sub(hd.Start))})
			}
			if hd.Token <= earlier.Token {
				out = append(out, Anomaly{"token-order", fmt.Sprintf("lock %s: %s got token %d at %s, after %s got token %d at %s",
					lockID, hd.Process, hd.Token, stamp(hd.Start), earlier.Process, earlier.Token, stamp(earlier.Start))})
			}
		}
	}
	return out
}

// checkWrites checks the fenced resource's judgement of one lock's writes: it accepted no token
// lower than one it accepted before, and no token that another writer had set.
func checkWrites(lockID string, writes []fencedstore.Record) []Anomaly {
	var out []Anomaly
	var highest int64
	setBy := ""
	for _, w := range writes {
		if !w.Accepted {
			continue
		}
		switch {
		case w.Token < highest:
			out = append(out, Anomaly{"stale-write", fmt.Sprintf("lock %s: write %d by %s with token %d accepted after token %d",
				lockID, w.Seq, w.Writer, w.Token, highest)})
		case w.Token == highest && w.Writer != setBy:
			out = append(out, Anomaly{"shared-token", fmt.Sprintf("lock %s: write %d by %s with token %d, which %s wrote with",
				lockID, w.Seq, w.Writer, w.Token, setBy)})
		case w.Token > highest:
			highest, setBy = w.Token, w.Writer
		}
	}
	return out
}

// checkRegrant checks that every lock granted in the run was granted again within bound of the
// last fault's healing (when the run went on that long).
func checkRegrant(h History, byLock map[string][]Hold, bound time.Duration) []Anomaly {
	var healed time.Time
	for _, f := range h.Faults {
		if f.End.After(healed) {
			healed = f.End
		}
	}
	if healed.IsZero() || h.End.Sub(healed) < bound {
		return nil
	}
	var out []Anomaly
	for _, lockID := range sortedKeys(byLock) {
		ok := slices.ContainsFunc(byLock[lockID], func(hd Hold) bool {
			return !hd.Start.Before(healed) && hd.Start.Sub(healed) <= bound ||
				hd.Start.Before(healed) && (hd.End.IsZero() || hd.End.After(healed))
		})
		if !ok {
			out = append(out, Anomaly{"liveness", fmt.Sprintf("lock %s: not held within %v after the last fault healed at %s", lockID, bound, stamp(healed))})
		}
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, cmp.Compare)
	return keys
}

func stamp(t time.Time) string { return t.Format("15:04:05.000") }
