package cassandrastore_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/baton-dev/baton/internal/testing/cutstore"
	"github.com/baton-dev/baton/internal/testing/testenv"
	"github.com/baton-dev/baton/lock"
	"github.com/baton-dev/baton/lock/cassandrastore"
	"github.com/baton-dev/baton/lock/storetest"
)

// TestSixteenContenders: 16 contenders with separate sessions never overlap and tokens grow.

// testRestartSecret is the restart secret of the zero-wait processes of these tests.
var testRestartSecret = []byte("cassandrastore-test-restart-secret")

func TestSixteenContenders(t *testing.T) {
	id := lockID(t)
	var log grantLog
	var wg sync.WaitGroup
	const rounds = 3
	for i := range 16 {
		store := newStore(t, single, "")
		l := newLocker(t, store, fmt.Sprintf("c%d", i))
		wg.Go(func() {
			for range rounds {
				lease, err := l.Acquire(ctxFor(t, 2*time.Minute), id)
				if err != nil {
					t.Errorf("contender %d: %v", i, err)
					return
				}
				start := time.Now()
				time.Sleep(10 * time.Millisecond)
				if !lease.Valid() {
					t.Errorf("contender %d: lease lost while holding: %v", i, lease.Err())
				}
				log.add(hold{who: l.Owner().String(), token: lease.Token(), start: start, end: time.Now()})
				release(t, lease)
			}
		})
	}
	wg.Wait()
	log.check(t)
	if got := len(log.holds); got != 16*rounds {
		t.Fatalf("%d grants, want %d", got, 16*rounds)
	}
}

// TestTryAcquire: Try fails while held and while others are queued ahead, and succeeds when free.
func TestTryAcquire(t *testing.T) {
	store := newStore(t, single, "")
	id := lockID(t)
	a, b := newLocker(t, store, "a"), newLocker(t, store, "b")
	ctx := ctxFor(t, time.Minute)

	la, err := a.TryAcquire(ctx, id)
	if err != nil {
		t.Fatalf("try on a free lock: %v", err)
	}
	if _, err := b.TryAcquire(ctx, id); !errors.Is(err, lock.ErrLocked) {
		t.Fatalf("try on a held lock: got %v, want ErrLocked", err)
	}
	if _, err := a.TryAcquire(ctx, id); !errors.Is(err, lock.ErrAlreadyHeld) {
		t.Fatalf("try by the holder: got %v, want ErrAlreadyHeld", err)
	}
	release(t, la)
	lb, err := b.TryAcquire(ctx, id)
	if err != nil {
		t.Fatalf("try after release: %v", err)
	}
	if lb.Token() != la.Token()+1 {
		t.Fatalf("token %d after %d, want +1", lb.Token(), la.Token())
	}

	// A slow waiter queues behind b; once b releases, the lock is free but the waiter is ahead.
	slow := newLocker(t, store, "slow", lock.WithPollInterval(3*time.Second),
		lock.WithWaiterPollInterval(3*time.Second), lock.WithQueueEntryTTL(9*time.Second))
	got := make(chan *lock.Lease, 1)
	go func() {
		l, err := slow.Acquire(ctx, id)
		if err != nil {
			t.Errorf("slow waiter: %v", err)
		}
		got <- l
	}()
	testenv.WaitFor(t, "the slow waiter to queue", 30*time.Second, func() bool {
		st, err := lock.Inspect(ctx, store, id)
		return err == nil && len(st.Queue) == 1
	})
	release(t, lb)
	if _, err := a.TryAcquire(ctx, id); !errors.Is(err, lock.ErrLocked) || !strings.Contains(err.Error(), "queued") {
		t.Fatalf("try with a waiter queued ahead: got %v, want ErrLocked naming the queue", err)
	}
	ls := <-got
	if ls == nil || ls.Token() != lb.Token()+1 {
		t.Fatalf("slow waiter should get the lock next")
	}
	release(t, ls)
}

// TestReleaseHandsOffInQueueOrder: waiters get the lock in arrival order.
func TestReleaseHandsOffInQueueOrder(t *testing.T) {
	store := newStore(t, single, "")
	id := lockID(t)
	ctx := ctxFor(t, time.Minute)
	holder, err := newLocker(t, store, "holder").Acquire(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	type grant struct {
		i     int
		lease *lock.Lease
		at    time.Time
	}
	grants := make(chan grant, 3)
	for i := range 3 {
		l := newLocker(t, store, fmt.Sprintf("w%d", i))
		go func() {
			lease, err := l.Acquire(ctx, id)
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
				return
			}
			grants <- grant{i, lease, time.Now()}
		}()
		testenv.WaitFor(t, fmt.Sprintf("waiter %d to queue", i), 30*time.Second, func() bool {
			st, err := lock.Inspect(ctx, store, id)
			return err == nil && len(st.Queue) == i+1
		})
	}
	prev := holder
	for want := range 3 {
		start := time.Now()
		release(t, prev)
		g := <-grants
		if g.i != want {
			t.Fatalf("waiter %d was granted before waiter %d", g.i, want)
		}
		if g.lease.Token() != prev.Token()+1 {
			t.Fatalf("token %d after %d", g.lease.Token(), prev.Token())
		}
		t.Logf("handoff to waiter %d took %v", g.i, g.at.Sub(start))
		prev = g.lease
	}
	release(t, prev)
}

// TestTakeoverAfterLease: a holder that stops renewing fences itself before a waiter takes over,
// and the waiter takes over about one lease later.
func TestTakeoverAfterLease(t *testing.T) {
	cut := cutstore.New(newStore(t, single, ""))
	id := lockID(t)
	ctx := ctxFor(t, time.Minute)
	holder, err := newLocker(t, cut, "holder").Acquire(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	cut.Cut(true)
	cutAt := time.Now()
	waiter, err := newLocker(t, newStore(t, single, ""), "waiter").Acquire(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(cutAt)
	select {
	case <-holder.Done():
	default:
		t.Fatal("the waiter was granted while the old holder still claimed the lock")
	}
	if !errors.Is(holder.Err(), lock.ErrLeaseExpired) {
		t.Fatalf("old holder's loss reason: %v, want ErrLeaseExpired", holder.Err())
	}
	if waiter.Token() != holder.Token()+1 {
		t.Fatalf("token %d after %d", waiter.Token(), holder.Token())
	}
	if took < testLease-testLease/3 || took > testLease+3*time.Second {
		t.Fatalf("takeover after %v, want about one lease (%v)", took, testLease)
	}
	t.Logf("takeover %v after the holder was cut off (lease %v)", took, testLease)
	release(t, waiter)
}

// TestSelfFenceWhenCassandraUnreachable: the holder's connection to Cassandra stalls; it reports
// the loss before the lease ends, and only then may another owner be granted.
func TestSelfFenceWhenCassandraUnreachable(t *testing.T) {
	cl := single.Cluster(t)
	proxy, err := testenv.NewProxy(cl.Hosts()[0])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	host, viaProxy := proxied(proxy)
	session, err := testenv.NewSession([]string{host}, viaProxy)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		proxy.Stall(false)
		if !cassandrastore.CloseSession(session, 3*time.Second) {
			t.Log("gocql Session.Close hung after the stall (known driver deadlock); left behind")
		}
	})
	newStore(t, single, "") // schema
	store, err := cassandrastore.New(ctxFor(t, time.Minute), session, cassandrastore.WithKeyspace(keyspace))
	if err != nil {
		t.Fatal(err)
	}
	id := lockID(t)
	ctx := ctxFor(t, time.Minute)
	holder, err := newLocker(t, store, "holder").Acquire(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	stalledAt := time.Now()
	proxy.Stall(true)
	lost := make(chan time.Time, 1)
	go func() {
		<-holder.Done()
		lost <- time.Now()
	}()
	waiter, err := newLocker(t, newStore(t, single, ""), "waiter").Acquire(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	grantedAt := time.Now()
	lostAt := <-lost
	if !errors.Is(holder.Err(), lock.ErrLeaseExpired) {
		t.Fatalf("loss reason %v, want ErrLeaseExpired", holder.Err())
	}
	if !lostAt.Before(grantedAt) {
		t.Fatalf("the holder reported the loss at %v, after the waiter was granted at %v", lostAt.Sub(stalledAt), grantedAt.Sub(stalledAt))
	}
	if lostAt.Sub(stalledAt) > testLease {
		t.Fatalf("the holder reported the loss %v after the stall, later than one lease", lostAt.Sub(stalledAt))
	}
	t.Logf("holder fenced itself %v after Cassandra became unreachable; waiter granted %v after", lostAt.Sub(stalledAt), grantedAt.Sub(stalledAt))
	release(t, waiter)
}

// TestRevocation: a revoked holder learns it at its next renewal; the next waiter gets a larger
// token; a stale token cannot be revoked.
func TestRevocation(t *testing.T) {
	store := newStore(t, single, "")
	id := lockID(t)
	ctx := ctxFor(t, time.Minute)
	holder, err := newLocker(t, store, "holder").Acquire(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if err := lock.Revoke(ctx, store, id, holder.Token()+5); !errors.Is(err, lock.ErrNotHolder) {
		t.Fatalf("revoking a token that was never granted: %v, want ErrNotHolder", err)
	}
	got := make(chan *lock.Lease, 1)
	go func() {
		l, err := newLocker(t, store, "waiter").Acquire(ctx, id)
		if err != nil {
			t.Errorf("waiter: %v", err)
		}
		got <- l
	}()
	revokedAt := time.Now()
	if err := lock.Revoke(ctx, store, id, holder.Token()); err != nil {
		t.Fatalf("revoke: %v", err)
	}
	select {
	case <-holder.Done():
	case <-time.After(testLease):
		t.Fatal("the revoked holder did not notice within one lease")
	}
	if !errors.Is(holder.Err(), lock.ErrRevoked) {
		t.Fatalf("loss reason %v, want ErrRevoked", holder.Err())
	}
	noticed := time.Since(revokedAt)
	w := <-got
	if w == nil || w.Token() != holder.Token()+1 {
		t.Fatal("the waiter should be granted the next token")
	}
	t.Logf("revoked holder noticed after %v; waiter granted after %v", noticed, time.Since(revokedAt))
	if err := lock.Revoke(ctx, store, id, holder.Token()); !errors.Is(err, lock.ErrNotHolder) {
		t.Fatalf("revoking the old token again: %v, want ErrNotHolder", err)
	}
	release(t, w)
}

// TestRestartTakesOverAtOnce: with WithZeroWaitRestart, a new incarnation of the holder's
// identity takes over its predecessor's grant at once with a new token (package lock, rule 7), even with
// standbys queued: leadership does not move because the holder's process restarted.
func TestRestartTakesOverAtOnce(t *testing.T) {
	cut := cutstore.New(newStore(t, single, ""))
	id := lockID(t)
	ctx := ctxFor(t, time.Minute)
	zeroWait := []lock.Option{lock.WithLease(30 * time.Second), lock.WithZeroWaitRestart(testRestartSecret)}
	first, err := lock.New(cut, lock.Owner{Identity: "ns/pod/uid-1", Incarnation: "a"}, zeroWait...)
	if err != nil {
		t.Fatal(err)
	}
	old, err := first.Acquire(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	// Two standbys queue behind the holder.
	standbys, cancelStandbys := context.WithCancel(ctx)
	var wg sync.WaitGroup
	t.Cleanup(func() { cancelStandbys(); wg.Wait() })
	for i := range 2 {
		s := newLocker(t, newStore(t, single, ""), fmt.Sprintf("standby-%d", i), lock.WithLease(30*time.Second), lock.WithZeroWaitRestart(testRestartSecret))
		wg.Go(func() {
			if l, err := s.Acquire(standbys, id); err == nil {
				t.Errorf("standby %d was granted token %d", i, l.Token())
				release(t, l)
			}
		})
	}
	testenv.WaitFor(t, "two standbys to queue", 30*time.Second, func() bool {
		st, err := lock.Inspect(ctx, cut, id)
		return err == nil && len(st.Queue) == 2
	})
	cut.Cut(true) // the old process dies without releasing
	second, err := lock.New(newStore(t, single, ""), lock.Owner{Identity: "ns/pod/uid-1", Incarnation: "b"}, zeroWait...)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	l, err := second.Acquire(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("restart takeover took %v with two standbys queued; it should not wait for the 30s lease", took)
	}
	if l.Token() != old.Token()+1 {
		t.Fatalf("token %d after %d", l.Token(), old.Token())
	}
	cancelStandbys()
	wg.Wait()
	release(t, l)
}

// TestBadInput: invalid lock IDs, options and store settings are rejected with clear errors.
func TestBadInput(t *testing.T) {
	store := newStore(t, single, "")
	l := newLocker(t, store, "bad")
	ctx := ctxFor(t, time.Minute)
	for _, id := range []string{"", strings.Repeat("x", lock.MaxIDLength+1), "has space", "bad\x00byte", "\xff"} {
		if _, err := l.Acquire(ctx, id); !errors.Is(err, lock.ErrInvalidLockID) {
			t.Errorf("Acquire(%q): %v, want ErrInvalidLockID", id, err)
		}
	}
	owner, _ := lock.NewOwner("test/bad")
	for _, o := range []lock.Option{lock.WithLease(0), lock.WithRenewInterval(0), lock.WithSafetyMargin(-time.Second), lock.WithRequestTimeout(0)} {
		if _, err := lock.New(store, owner, o); !errors.Is(err, lock.ErrInvalidOption) {
			t.Errorf("zero or negative duration accepted: %v", err)
		}
	}
	session := single.Session(t)
	for _, tc := range []struct {
		name string
		opts []cassandrastore.Option
		want string
	}{
		{"bad keyspace", []cassandrastore.Option{cassandrastore.WithKeyspace("no-dash")}, "keyspace"},
		{"weak consistency", []cassandrastore.Option{cassandrastore.WithKeyspace(keyspace), cassandrastore.WithConsistency(gocql.One)}, "too weak"},
		{"bad serial", []cassandrastore.Option{cassandrastore.WithKeyspace(keyspace), cassandrastore.WithSerialConsistency(gocql.Quorum)}, "SERIAL"},
		{"missing schema", []cassandrastore.Option{cassandrastore.WithKeyspace("system")}, "EnsureSchema"},
	} {
		if _, err := cassandrastore.New(context.Background(), session, tc.opts...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error mentioning %q", tc.name, err, tc.want)
		}
	}
}

// TestRecreatedRecordStartsAboveOldTokens: an owner record deleted by an administrator (here a
// plain DELETE, as a TRUNCATE would) is created again with a token above every earlier one.
func TestRecreatedRecordStartsAboveOldTokens(t *testing.T) {
	session := single.Session(t)
	store := newStore(t, single, "")
	id := lockID(t)
	ctx := ctxFor(t, time.Minute)
	l := newLocker(t, store, "recreate")
	var last int64
	for range 2 {
		lease, err := l.Acquire(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		last = lease.Token()
		release(t, lease)
	}
	if err := session.Query(`DELETE FROM `+keyspace+`.lock_owners WHERE lock_id = ?`, id).ExecContext(ctx); err != nil {
		t.Fatal(err)
	}
	if st, err := lock.Inspect(ctx, store, id); err != nil || st.Exists {
		t.Fatalf("after DELETE: %+v %v", st, err)
	}
	lease, err := l.Acquire(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	defer release(t, lease)
	if lease.Token() <= last {
		t.Fatalf("re-created record issued token %d after %d", lease.Token(), last)
	}
}

// TestQueueTombstonesAreShortLived: the queue table purges the tombstones of finished waiters
// after QueueGCGraceSeconds, also in a keyspace created by an earlier release (gc_grace 600), and
// the owner table has no default TTL. Both tables of such a keyspace also get SpeculativeRetry.
func TestQueueTombstonesAreShortLived(t *testing.T) {
	session := single.Session(t)
	ctx := ctxFor(t, 2*time.Minute)
	ks := "baton_old_schema"
	for _, stmt := range []string{
		`CREATE KEYSPACE IF NOT EXISTS ` + ks + ` WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}`,
		`CREATE TABLE IF NOT EXISTS ` + ks + `.lock_queue (lock_id text, enqueued bigint, owner text,
			PRIMARY KEY (lock_id, enqueued, owner)) WITH gc_grace_seconds = 600`,
		`CREATE TABLE IF NOT EXISTS ` + ks + `.lock_owners (lock_id text PRIMARY KEY, owner text, fencing_token bigint,
			version bigint, lease_ms bigint, revoked boolean, granted_at timestamp, renewed_at timestamp)`,
	} {
		if err := session.Query(stmt).ExecContext(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := cassandrastore.EnsureSchema(ctx, session, ks, ""); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		table      string
		grace, ttl int
	}{
		{"lock_queue", cassandrastore.QueueGCGraceSeconds, 0},
		{"lock_owners", 864000, 0},
	} {
		var grace, ttl int
		var spec string
		if err := session.Query(`SELECT gc_grace_seconds, default_time_to_live, speculative_retry FROM system_schema.tables WHERE keyspace_name = ? AND table_name = ?`,
			ks, tc.table).ScanContext(ctx, &grace, &ttl, &spec); err != nil {
			t.Fatal(err)
		}
		if grace != tc.grace || ttl != tc.ttl || spec != cassandrastore.SpeculativeRetry {
			t.Errorf("%s.%s: gc_grace_seconds %d, default_time_to_live %d, speculative_retry %q; want %d, %d and %q",
				ks, tc.table, grace, ttl, spec, tc.grace, tc.ttl, cassandrastore.SpeculativeRetry)
		}
	}
}

// TestQueueHintColumnIsAdded: a keyspace whose queue table has no hint column (created by a release
// before hand-off hints) keeps working, its waiters only poll, and EnsureSchema adds the column,
// after which queue entries carry their hint addresses.
func TestQueueHintColumnIsAdded(t *testing.T) {
	session := single.Session(t)
	ctx := ctxFor(t, 2*time.Minute)
	ks := "baton_no_hint"
	if err := cassandrastore.EnsureSchema(ctx, session, ks, ""); err != nil {
		t.Fatal(err)
	}
	if err := session.Query(`ALTER TABLE ` + ks + `.lock_queue DROP hint`).ExecContext(ctx); err != nil {
		t.Fatal(err)
	}
	roundTrip := func(wantHint string) {
		t.Helper()
		store, err := cassandrastore.New(ctx, single.Session(t), cassandrastore.WithKeyspace(ks))
		if err != nil {
			t.Fatal(err)
		}
		id := lockID(t)
		e := lock.QueueEntry{Enqueued: 1, Owner: "a", Hint: "198.18.0.1:9465"}
		if err := store.Enqueue(ctx, id, e, time.Minute); err != nil {
			t.Fatal(err)
		}
		got, err := store.Queue(ctx, id, 0, 10)
		// The write stamp is the hint cell's write time: none without the column.
		want := []lock.QueueEntry{{Enqueued: 1, Owner: "a", Hint: wantHint}}
		if err != nil || len(got) != 1 || (got[0].Written != 0) != (wantHint != "") {
			t.Fatalf("Queue: %v, %v; want %v, with a write stamp only with the hint column", got, err, want)
		}
		got[0].Written = 0
		if !slices.Equal(got, want) {
			t.Fatalf("Queue: %v; want %v", got, want)
		}
	}
	roundTrip("") // without the column: no hints, but the queue works
	if err := cassandrastore.EnsureSchema(ctx, session, ks, ""); err != nil {
		t.Fatal(err)
	}
	roundTrip("198.18.0.1:9465")
	if err := cassandrastore.EnsureSchema(ctx, session, ks, ""); err != nil {
		t.Fatalf("EnsureSchema again, with the column there: %v", err)
	}
}

// TestFencedUpdateRejectsStaleHolder runs the fencing idiom of Example_fencedUpdate on real
// Cassandra: after a newer holder wrote, the older holder's conditional update does not apply.
func TestFencedUpdateRejectsStaleHolder(t *testing.T) {
	session := single.Session(t)
	store := newStore(t, single, "")
	ctx := ctxFor(t, time.Minute)
	id := lockID(t)
	table := keyspace + ".fenced_orders"
	if err := session.Query(`CREATE TABLE IF NOT EXISTS ` + table + ` (id text PRIMARY KEY, state text, fence bigint)`).ExecContext(ctx); err != nil {
		t.Fatal(err)
	}
	if err := session.Query(`INSERT INTO `+table+` (id, state, fence) VALUES (?, 'new', 0) IF NOT EXISTS`, id).ExecContext(ctx); err != nil {
		t.Fatal(err)
	}
	write := func(lease *lock.Lease, state string) (bool, error) {
		var applied bool
		err := lease.Fenced(ctx, func(ctx context.Context, token int64) error {
			var err error
			applied, err = session.Query(`UPDATE `+table+` SET state = ?, fence = ? WHERE id = ? IF fence <= ?`,
				state, token, id, token).MapScanCASContext(ctx, map[string]any{})
			return err
		})
		return applied, err
	}
	old, err := newLocker(t, store, "old").Acquire(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := write(old, "packed"); err != nil || !ok {
		t.Fatalf("holder's fenced write: applied %v, %v", ok, err)
	}
	oldToken := old.Token()
	release(t, old)
	lease, err := newLocker(t, store, "new").Acquire(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	defer release(t, lease)
	if ok, err := write(lease, "shipped"); err != nil || !ok {
		t.Fatalf("new holder's fenced write: applied %v, %v", ok, err)
	}
	// The old holder, paused past its lease, still has its token and tries to write.
	applied, err := session.Query(`UPDATE `+table+` SET state = ?, fence = ? WHERE id = ? IF fence <= ?`,
		"cancelled", oldToken, id, oldToken).MapScanCASContext(ctx, map[string]any{})
	if err != nil || applied {
		t.Fatalf("stale holder's write: applied %v, %v; want rejected", applied, err)
	}
	var state string
	if err := session.Query(`SELECT state FROM `+table+` WHERE id = ?`, id).Consistency(gocql.Serial).ScanContext(ctx, &state); err != nil || state != "shipped" {
		t.Fatalf("row state %q, %v; want the new holder's write", state, err)
	}
}

// TestContract: the store keeps lock.Store's contract on a real Cassandra (the in-memory store
// runs the same tests).
func TestContract(t *testing.T) {
	storetest.Run(t, func(t *testing.T) lock.Store { return newStore(t, single, "") })
}
