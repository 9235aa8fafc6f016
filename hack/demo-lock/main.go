// Command demo-lock runs contenders on one lock against a local Cassandra and prints a live timeline:
// who holds the lock, its fencing token, the queue, and each handoff when the holder is stopped
// (alternately released gracefully and killed without release, so its lease must expire).
//
//	go run ./hack/demo-lock [-contenders 5] [-handoffs 4] [-lease 5s]
//
// It uses the Cassandra started by `go run ./hack/cassandra start` when one is running, and
// otherwise starts (and afterwards stops) its own single node.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/baton-dev/baton/internal/testing/cutstore"
	"github.com/baton-dev/baton/internal/testing/localcassandra"
	"github.com/baton-dev/baton/lock"
	"github.com/baton-dev/baton/lock/cassandrastore"
)

type options struct {
	contenders int
	handoffs   int
	lease      time.Duration
	lockID     string
}

func main() {
	var o options
	flag.IntVar(&o.contenders, "contenders", 5, "number of contenders (2-64)")
	flag.IntVar(&o.handoffs, "handoffs", 4, "how many times to stop the holder (1-100)")
	flag.DurationVar(&o.lease, "lease", 5*time.Second, "lease duration (1s-1m)")
	flag.StringVar(&o.lockID, "lock", "demo/orders", "lock ID")
	flag.Parse()
	if err := o.validate(); err != nil {
		fmt.Fprintf(os.Stderr, "demo: %v\n", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o, os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "demo: %v\n", err)
		os.Exit(1)
	}
}

func (o options) validate() error {
	switch {
	case o.contenders < 2 || o.contenders > 64:
		return fmt.Errorf("-contenders %d: want 2 to 64", o.contenders)
	case o.handoffs < 1 || o.handoffs > 100:
		return fmt.Errorf("-handoffs %d: want 1 to 100", o.handoffs)
	case o.lease < time.Second || o.lease > time.Minute:
		return fmt.Errorf("-lease %v: want 1s to 1m", o.lease)
	}
	return lock.ValidateLockID(o.lockID)
}

// worker is one contender with a switch that kills its connection to Cassandra.
type worker struct {
	name   string
	store  *cutstore.Store
	locker *lock.Locker
	stop   chan bool // true: release gracefully; false: die without releasing
}

func run(ctx context.Context, o options, out io.Writer) error {
	node := localcassandra.Demo()
	node.Progress = out
	hosts, cleanup, err := localcassandra.RunningOrStart(ctx, node)
	if err != nil {
		return err
	}
	defer cleanup()

	cc := gocql.NewCluster(hosts...)
	cc.Timeout, cc.Consistency = 2*time.Second, gocql.Quorum
	session, err := cc.CreateSession()
	if err != nil {
		return fmt.Errorf("connecting to Cassandra at %v: %w", hosts, err)
	}
	defer session.Close()
	if err := cassandrastore.EnsureSchema(ctx, session, "", ""); err != nil {
		return err
	}
	store, err := cassandrastore.New(ctx, session)
	if err != nil {
		return err
	}

	names := make(map[string]string) // owner string → worker name
	var workers []*worker
	for i := range o.contenders {
		w := &worker{name: fmt.Sprintf("worker-%d", i), stop: make(chan bool, 1)}
		if err := w.start(o, store, names); err != nil {
			return err
		}
		workers = append(workers, w)
	}
	fmt.Fprintf(out, "demo: %d contenders on lock %q, lease %v; the holder is stopped %d times\n\n",
		o.contenders, o.lockID, o.lease, o.handoffs)

	started := time.Now()
	for _, w := range workers {
		go w.loop(ctx, o.lockID)
	}
	var last lock.Status
	var handoffs []time.Duration
	stopAt, stoppedAt, graceful := time.Now().Add(2*time.Second), time.Time{}, true
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for len(handoffs) < o.handoffs {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		st, err := lock.Inspect(ctx, store, o.lockID)
		if err != nil {
			fmt.Fprintf(out, "%7.1fs  store error: %v\n", time.Since(started).Seconds(), err)
			continue
		}
		if changed(last, st) {
			printStatus(out, time.Since(started), st, names)
			if !stoppedAt.IsZero() && st.Record.Held() && st.Record.Token != last.Record.Token {
				d := time.Since(stoppedAt)
				handoffs = append(handoffs, d)
				kind := "after graceful release"
				if !graceful {
					kind = "after the holder was killed (lease expiry)"
				}
				fmt.Fprintf(out, "          ↳ handoff %s took %v\n", kind, d.Round(time.Millisecond))
				stoppedAt, graceful = time.Time{}, !graceful
				stopAt = time.Now().Add(2 * time.Second)
			}
			last = st
		}
		if stoppedAt.IsZero() && time.Now().After(stopAt) && st.Record.Held() && !st.Record.Revoked {
			holder := names[st.Record.Owner]
			for _, w := range workers {
				if w.name == holder {
					verb := "stopping %s gracefully (releases the lock)"
					if !graceful {
						verb = "killing %s (no release: its lease must run out)"
					}
					fmt.Fprintf(out, "%7.1fs  "+verb+"\n", time.Since(started).Seconds(), holder)
					w.stop <- graceful
					stoppedAt = time.Now()
				}
			}
		}
	}
	fmt.Fprintf(out, "\ndemo: %d handoffs, tokens only grew; done in %v\n", len(handoffs), time.Since(started).Round(time.Second))
	for _, w := range workers {
		select {
		case w.stop <- true:
		default:
		}
	}
	return nil
}

func (w *worker) start(o options, store lock.Store, names map[string]string) error {
	w.store = cutstore.New(store)
	owner, err := lock.NewOwner("demo/" + w.name)
	if err != nil {
		return err
	}
	w.locker, err = lock.New(w.store, owner, lock.WithLease(o.lease))
	if err != nil {
		return err
	}
	names[owner.String()] = w.name
	return nil
}

// loop acquires the lock, holds it until told to stop, and queues again; a killed worker stays
// dead.
func (w *worker) loop(ctx context.Context, lockID string) {
	for ctx.Err() == nil {
		lease, err := w.locker.Acquire(ctx, lockID)
		if err != nil {
			if !errors.Is(err, context.Canceled) {
				time.Sleep(time.Second)
			}
			continue
		}
		select {
		case graceful := <-w.stop:
			if !graceful {
				w.store.Cut(true) // the process "dies": no renewals, no release
				return
			}
			rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = lease.Release(rctx)
			cancel()
			time.Sleep(500 * time.Millisecond) // then queue again at the back
		case <-lease.Done():
		case <-ctx.Done():
			rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = lease.Release(rctx)
			cancel()
			return
		}
	}
}

func changed(a, b lock.Status) bool {
	return !a.Record.Held() && b.Record.Held() || a.Record.Token != b.Record.Token ||
		a.Record.Owner != b.Record.Owner || !slices.Equal(a.Queue, b.Queue)
}

func printStatus(out io.Writer, at time.Duration, st lock.Status, names map[string]string) {
	holder := "(free)"
	if st.Record.Held() {
		holder = names[st.Record.Owner]
	}
	queue := make([]string, 0, len(st.Queue))
	for _, e := range st.Queue {
		queue = append(queue, names[e.Owner])
	}
	fmt.Fprintf(out, "%7.1fs  holder %-9s token %-4d queue [%s]\n", at.Seconds(), holder, st.Record.Token, strings.Join(queue, " "))
}
