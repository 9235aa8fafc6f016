package lock

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"k8s.io/utils/clock"
)

// TestScheduleDefaults pins the poll schedule's figures at the default options (docs/design.md,
// the poll schedule): what each role waits, and how a watcher judges an entry by its mode (an entry
// with a hint address is rewritten every 10 s, one without every 3.3 s), so that a Locker with
// hints and one without on the same lock do not count each other's live entries dead. A watcher
// judges a hinted head by the longest head poll a hinted Locker may have (MaxHintedHeadPoll), not
// by its own lease: a watcher at a 3 s lease must not skip the live head of a Locker at 15 s.
func TestScheduleDefaults(t *testing.T) {
	for _, tc := range []struct {
		name                          string
		opts                          []Option
		ttl, headPoll, rest           time.Duration
		staleHinted, stalePlain       time.Duration
		deadHeadHinted, deadHeadPlain time.Duration
	}{
		{name: "without hints", ttl: 10 * time.Second, headPoll: time.Second, rest: 10 * time.Second,
			staleHinted: 12 * time.Second, stalePlain: 10*time.Second/3 + 2*time.Second, deadHeadHinted: 4 * time.Second, deadHeadPlain: time.Second},
		{name: "with hints", opts: []Option{WithHinter(noHinter{})}, ttl: 30 * time.Second, headPoll: time.Second, rest: 10 * time.Second,
			staleHinted: 12 * time.Second, stalePlain: 10*time.Second/3 + 2*time.Second, deadHeadHinted: 4 * time.Second, deadHeadPlain: time.Second},
		{name: "lease 3s", opts: []Option{WithLease(3 * time.Second), WithHinter(noHinter{})}, ttl: 30 * time.Second, headPoll: 200 * time.Millisecond, rest: 10 * time.Second,
			staleHinted: 12 * time.Second, stalePlain: 10*time.Second/3 + 2*time.Second, deadHeadHinted: 4 * time.Second, deadHeadPlain: time.Second},
		{name: "explicit TTL", opts: []Option{WithQueueEntryTTL(6 * time.Second), WithHinter(noHinter{})}, ttl: 6 * time.Second, headPoll: time.Second, rest: 2 * time.Second,
			staleHinted: 4 * time.Second, stalePlain: 4 * time.Second, deadHeadHinted: 4 * time.Second, deadHeadPlain: time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := buildOptions(tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			hinted, plain := QueueEntry{Hint: "10.0.0.1:9465"}, QueueEntry{}
			for _, c := range []struct {
				what      string
				got, want time.Duration
			}{
				{"queue entry TTL", o.queueEntryTTL, tc.ttl},
				{"hinted head poll", o.hintedHeadPoll(), tc.headPoll},
				{"hinted rest poll", o.hintedRestPoll(hinted), tc.rest},
				{"stale after, hinted entry", o.staleEntryAfter(hinted), tc.staleHinted},
				{"stale after, plain entry", o.staleEntryAfter(plain), tc.stalePlain},
				{"dead head free, hinted head", o.deadHeadFree(hinted), tc.deadHeadHinted},
				{"dead head free, plain head", o.deadHeadFree(plain), tc.deadHeadPlain},
			} {
				if c.got != c.want {
					t.Errorf("%s: %v, want %v", c.what, c.got, c.want)
				}
			}
		})
	}
}

// TestContendWaitsOutTheObservation: a hinted head that observes a held record waits one head poll
// (1 s at the default lease) while the lease it observes has longer to run, and exactly what is
// left of it once that is less, so that a crashed holder's lock is taken over a lease after the
// first sighting of its last write, not up to a head poll later (TestCrashFailoverBound).
func TestContendWaitsOutTheObservation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &oneRecordStore{records: map[string]Record{
			"x": {Owner: "other#1", Token: 7, Version: 3, Lease: DefaultLease},
		}}
		// Go's clock, virtual in the bubble: the default one adds the machine's real suspended time,
		// which moves by microseconds between readings.
		l, err := New(store, Owner{Identity: "a", Incarnation: "1"}, WithClock(clock.RealClock{}))
		if err != nil {
			t.Fatal(err)
		}
		a := &acquisition{l: l, lockID: "x", block: true, queued: true, wasHead: true, hintAddr: "10.0.0.1:9465"}
		ctx := context.Background()
		if _, wait, err := a.contend(ctx, nil); err != nil || wait != a.headPoll() {
			t.Fatalf("first sighting: wait %v (err %v); want one head poll, %v", wait, err, a.headPoll())
		}
		seen := time.Now() // the store answers at once: the observation starts here
		for _, left := range []time.Duration{999 * time.Millisecond, 300 * time.Millisecond, time.Millisecond} {
			time.Sleep(time.Until(seen.Add(DefaultLease - left)))
			if _, wait, err := a.contend(ctx, nil); err != nil || wait != left {
				t.Errorf("%v before the observed lease ends: wait %v (err %v); want exactly %v", left, wait, err, left)
			}
		}
		time.Sleep(time.Until(seen.Add(DefaultLease)))
		lease, _, err := a.contend(ctx, nil)
		if err != nil || lease == nil {
			t.Fatalf("a lease after the first sighting: not granted (err %v)", err)
		}
		_ = lease.Release(ctx)
	})
}
