package cassandrastore_test

import (
	"slices"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/testing/localhint"
	"github.com/baton-dev/baton/lock"
)

// BenchmarkUncontended compares one lightweight-transaction round trip with an uncontended
// Acquire on the same node (docs/design.md, Targets).
func BenchmarkUncontended(b *testing.B) {
	store := newStore(b, single, "")
	ctx := ctxFor(b, 10*time.Minute)

	b.Run("lwt-round-trip", func(b *testing.B) {
		id := lockID(b)
		var prev lock.Record
		for b.Loop() {
			next := lock.Record{Owner: "bench", Token: prev.Token + 1, Version: prev.Version + 1, Lease: time.Second}
			applied, _, _, err := store.CompareAndSwap(ctx, id, prev, next)
			if err != nil || !applied {
				b.Fatalf("CAS: applied %v, %v", applied, err)
			}
			prev = next
		}
	})
	b.Run("acquire", func(b *testing.B) {
		id := lockID(b)
		l := newLocker(b, store, "bench")
		for b.Loop() {
			lease, err := l.Acquire(ctx, id)
			if err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			if err := lease.Release(ctx); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
	})
}

// BenchmarkHandoff measures the time from a holder's Release call to the queue head's Acquire
// returning, polling (default head poll) and with an in-process hand-off hint.
func BenchmarkHandoff(b *testing.B) {
	store := newStore(b, single, "")
	for _, mode := range []string{"poll-default", "wake-hint"} {
		b.Run(mode, func(b *testing.B) {
			ctx := ctxFor(b, 10*time.Minute)
			id := lockID(b)
			opts := []lock.Option{lock.WithPollInterval(lock.DefaultPollInterval)}
			if mode == "wake-hint" {
				opts = append(opts, lock.WithHinter(localhint.New())) // one hinter shared by both
			}
			lockers := [2]*lock.Locker{newLocker(b, store, "a", opts...), newLocker(b, store, "b", opts...)}
			holder, err := lockers[0].Acquire(ctx, id)
			if err != nil {
				b.Fatal(err)
			}
			var took []time.Duration
			next := 1
			for b.Loop() {
				b.StopTimer()
				type res struct {
					l  *lock.Lease
					at time.Time
				}
				got := make(chan res, 1)
				go func() {
					l, err := lockers[next].Acquire(ctx, id)
					if err != nil {
						b.Error(err)
					}
					got <- res{l, time.Now()}
				}()
				for { // wait until the waiter is queued and polling as head
					st, err := lock.Inspect(ctx, store, id)
					if err == nil && len(st.Queue) == 1 {
						break
					}
					time.Sleep(5 * time.Millisecond)
				}
				time.Sleep(time.Duration(next+1) * 37 * time.Millisecond) // vary the poll phase
				b.StartTimer()
				start := time.Now()
				if err := holder.Release(ctx); err != nil {
					b.Fatal(err)
				}
				r := <-got
				took = append(took, r.at.Sub(start))
				holder, next = r.l, 1-next
			}
			_ = holder.Release(ctx)
			slices.Sort(took)
			b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(took[len(took)*99/100].Microseconds())/1000, "p99-ms")
		})
	}
}
