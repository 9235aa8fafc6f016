package lock

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"k8s.io/utils/clock"
)

// TestWaitPrefersAReadyHint: a waiter behind the head whose probe's grace has run out while a hint
// for its entry is already waiting on its channel (both ready at once, the race of a probe timer and
// a hint firing together) acts on the hint, not on the silence: it returns the hint, is not deaf,
// and counts nothing missed. Acting on the probe first would make it deaf and step as a poll, and a
// poll that finds it moved up to the head counts the hint that had in fact arrived as missed.
func TestWaitPrefersAReadyHint(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, err := New(&oneRecordStore{}, Owner{Identity: "w", Incarnation: "1"}, WithClock(clock.RealClock{}), WithHinter(noHinter{}))
		if err != nil {
			t.Fatal(err)
		}
		hints := make(chan Hint, 2)
		a := &acquisition{l: l, lockID: "x", block: true, queued: true, ahead: 1, hintAddr: "w:1", hints: hints,
			entry: QueueEntry{Enqueued: 7, Owner: l.owner.String(), Hint: "w:1"}, enqueuedAt: time.Now()}
		a.budget = newHintBudget(time.Now(), l.opts.waiterPoll)
		a.probeAddr, a.probeSent, a.probeOut = "ahead:1", time.Now(), true
		time.Sleep(probeGrace) // the probe's grace has run out: its event is due
		ahead := Hint{LockID: "x", Owner: a.entry.Owner, Enqueued: 7, Kind: HintAhead}
		hints <- ahead
		got, err := a.wait(context.Background(), time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if got != ahead || a.deaf {
			t.Errorf("wait returned %+v, deaf %v; want the ahead hint that was ready, not deaf", got, a.deaf)
		}
	})
}
