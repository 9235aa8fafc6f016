package lock_test

// The simulation's checkers beyond safety: queue order (FIFO) and liveness. Safety is checked in
// sim_test.go (check).

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/baton-dev/baton/lock/memstore"
)

// queueReadSlack is the lock's margin below the oldest entry a bounded queue read starts at
// (lock/queueread.go): a waiter whose wall clock runs further behind may be missed by others'
// bounded reads for a while.
const queueReadSlack = 250 * time.Millisecond

// fifoResult is what the FIFO checker found: the overtakes it counts as violations, and how many it
// excused under each documented exception.
type fifoResult struct {
	violations []string
	excused    map[string]int
}

// The documented exceptions to queue order. Each names a case where the lock, by design, may grant
// an acquisition ahead of a waiter that was queued before it began (docs/design.md).
const (
	// A restarted process took over its own dead predecessor's grant (zero-wait restart, rule 7).
	excuseZeroWait = "zero-wait restart"
	// The waiter was cut off or paused while it waited: it may have been judged dead and skipped,
	// or could not take its turn.
	excuseFaulted = "waiter cut off or paused"
	// The two wall clocks differ by more than the bounded queue reads' slack, or the waiter's entry
	// or one ahead of it landed that much later than its enqueue time (a write delayed in the
	// network, or an entry rewritten under its old name by a waiter back from a pause): bounded
	// reads may miss it until the next read of the whole queue, so the waiters behind it may
	// disagree on who is the head (lock/queueread.go).
	excuseSkew = "skewed or late enqueue time"
)

// fifo checks queue order: no acquisition is granted while a blocking acquisition is still
// waiting whose queue entry was first in the store before the granted acquisition began, and is
// ordered before the granted acquisition's own entry (or any entry, when it has none: a try),
// whether or not that entry is in the store at the grant; but for the documented exceptions above,
// which it counts.
func fifo(h history) fifoResult {
	res := fifoResult{excused: map[string]int{}}
	ivs, _ := intervals(h)
	for _, x := range ivs {
		grant, ok := grantEvent(h, x)
		if !ok {
			continue
		}
		ax, ok := attemptOf(h, x.owner, x.committed)
		if !ok {
			continue
		}
		mine, queued := queuedEntry(h, ax, x.committed)
		for _, ay := range h.attempts {
			if !ay.block || ay.owner == x.owner || ay.start.After(x.committed) || !ay.end.IsZero() && !ay.end.After(x.committed) {
				continue // not a blocking acquisition waiting at the grant
			}
			y, ok := queuedEntry(h, ay, x.committed)
			if !ok || !ax.start.After(y.Since) || queued && !y.Less(mine.QueueEntry) {
				continue // not queued before we began, or behind us
			}
			if why := excuse(h, grant, x, ax, ay, y); why != "" {
				res.excused[why]++
				continue
			}
			mode := "blocking"
			if !ax.block {
				mode = "try"
			}
			res.violations = append(res.violations, fmt.Sprintf(
				"queue order: client %d (%s, began %v) was granted token %d at %v ahead of client %d, queued since %v and still waiting",
				x.client, mode, ax.start.Sub(h.start), x.token, x.committed.Sub(h.start), ay.client, y.Since.Sub(h.start)))
		}
	}
	return res
}

// queuedEntry returns the queue entry of attempt a, with the time it first became live, if it
// did so by t.
func queuedEntry(h history, a attempt, t time.Time) (memstore.QueuedEntry, bool) {
	for _, c := range h.queue {
		if c.At.After(t) {
			break
		}
		if c.Live && c.Entry.Owner == a.owner && !c.At.Before(a.start) {
			return memstore.QueuedEntry{QueueEntry: c.Entry, Since: c.At}, true
		}
	}
	return memstore.QueuedEntry{}, false
}

// excuse returns the documented exception that covers client x (attempt ax) being granted ahead of
// the waiter ay with entry y at grant, or "" when none does.
func excuse(h history, grant memstore.Event, x interval, ax, ay attempt, y memstore.QueuedEntry) string {
	switch {
	case grant.Prev.Held() && identityOf(grant.Prev.Owner) == identityOf(x.owner) &&
		restartTag(grant.Prev.Owner) != "" && restartTag(grant.Prev.Owner) == restartTag(x.owner):
		return excuseZeroWait
	case faulted(h, ay.client, y.Since.Add(-time.Second), x.committed):
		return excuseFaulted
	}
	if skew := ay.wallOffset - ax.wallOffset; skew.Abs() > queueReadSlack || late(y, ay.wallOffset) {
		return excuseSkew
	}
	// An entry ahead of the waiter's that became live late while the waiter waited.
	for _, c := range h.queue {
		if c.At.After(x.committed) {
			break
		}
		if !c.Live || c.At.Before(ay.start) || !c.Entry.Less(y.QueueEntry) {
			continue
		}
		e := memstore.QueuedEntry{QueueEntry: c.Entry, Since: c.At}
		if ae, ok := attemptOf(h, e.Owner, c.At); ok && late(e, ae.wallOffset) {
			return excuseSkew
		}
	}
	return ""
}

// late reports whether entry e, written by a process whose wall clock was offset by wallOffset,
// became live more than queueReadSlack after its enqueue time.
func late(e memstore.QueuedEntry, wallOffset time.Duration) bool {
	enqueued := time.UnixMicro(e.Enqueued).Add(-wallOffset) // the enqueue time on the true clock
	return e.Since.Sub(enqueued) > queueReadSlack
}

// liveness checks that the lock is never left free for longer than the class's bound while a
// live waiter waits for it: for every stretch of time in which no holder claims the lock, counted
// from the later of its start, the waiter's start and the end of the last fault (anywhere: a dead
// holder's record or a revocation keeps the lock for a lease), to the next grant or the end of the
// history.
func liveness(h history) []string {
	var problems []string
	ivs, _ := intervals(h)
	bound := h.class.livenessBound
	// The stretches in which nobody claims the lock.
	type gap struct{ from, to time.Time }
	var gaps []gap
	free := h.start
	for _, iv := range ivs {
		if iv.committed.After(free) {
			gaps = append(gaps, gap{free, iv.committed})
		}
		free = later(free, iv.ended)
	}
	if h.end.After(free) {
		gaps = append(gaps, gap{free, h.end})
	}
	for _, g := range gaps {
		for _, a := range h.attempts {
			end := a.end
			if end.IsZero() {
				end = h.end
			}
			if !a.block || !a.start.Before(g.to) || !end.After(g.from) {
				continue
			}
			from := later(g.from, a.start)
			for _, f := range h.faultLog {
				if f.from.Before(g.to) && f.to.After(from) {
					from = f.to
				}
			}
			if free := g.to.Sub(from); free > bound {
				problems = append(problems, fmt.Sprintf("liveness: the lock was free for %v (from %v) while client %d waited for it, after the last fault had healed; want a grant within %v",
					free, from.Sub(h.start), a.client, bound))
				break
			}
		}
	}
	return problems
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// grantEvent returns the store write that granted claim x.
func grantEvent(h history, x interval) (memstore.Event, bool) {
	for _, e := range h.events {
		if e.At.Equal(x.committed) && isGrant(e) && e.Next.Owner == x.owner && e.Next.Token == x.token {
			return e, true
		}
	}
	return memstore.Event{}, false
}

// attemptOf returns the acquisition of owner that was running at t.
func attemptOf(h history, owner string, t time.Time) (attempt, bool) {
	i := slices.IndexFunc(h.attempts, func(a attempt) bool {
		return a.owner == owner && !a.start.After(t) && (a.end.IsZero() || !a.end.Before(t))
	})
	if i < 0 {
		return attempt{}, false
	}
	return h.attempts[i], true
}

// faulted reports whether a fault hit client between from and to. Faults of the lock as a whole (a
// revocation, an administrator's change) excuse no overtake.
func faulted(h history, client int, from, to time.Time) bool {
	return slices.ContainsFunc(h.faultLog, func(f faultAt) bool {
		return f.client == client && !f.from.After(to) && !f.to.Before(from)
	})
}

// restartTag returns the restart tag an owner string carries (lock.WithZeroWaitRestart), "" when
// none: a zero-wait takeover needs the same one.
func restartTag(owner string) string {
	inc := owner[strings.LastIndex(owner, "#")+1:]
	if i := strings.LastIndex(inc, "~"); i >= 0 {
		return inc[i+1:]
	}
	return ""
}

// identityOf returns the identity part of an owner string.
func identityOf(owner string) string {
	if i := strings.LastIndex(owner, "#"); i >= 0 {
		return owner[:i]
	}
	return owner
}
