package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/lock"
	"github.com/baton-dev/baton/lock/cassandrastore"
)

// raiseKeyspace is raise-tokens' own keyspace: it raises every lock of a keyspace.
const raiseKeyspace = "baton_cli_raise"

// TestRaiseTokensAfterRestore (issue 25, item 7), against a real Cassandra node: a restore
// rolls a lock's owner record back (here: the record of an earlier grant written back with a
// plain INSERT, as a restore writes it), and the next grant repeats a token already used. After
// baton raise-tokens --floor (highest token seen + 1), the next grant of every lock is above the
// floor; a holder that still runs loses its lock at its next renewal and the next grant comes only
// after that; --dry-run writes nothing; a lower floor leaves every lock alone.
func TestRaiseTokensAfterRestore(t *testing.T) {
	ctx := context.Background()
	cl := single.Cluster(t)
	session := single.Session(t)
	if err := cassandrastore.EnsureSchema(ctx, session, raiseKeyspace, ""); err != nil {
		t.Fatal(err)
	}
	store, err := cassandrastore.New(ctx, session, cassandrastore.WithKeyspace(raiseKeyspace))
	if err != nil {
		t.Fatal(err)
	}
	const leaseDur = 3 * time.Second
	locker := func(name string) *lock.Locker {
		owner, err := lock.NewOwner("test/" + name)
		if err != nil {
			t.Fatal(err)
		}
		l, err := lock.New(store, owner, lock.WithLease(leaseDur))
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	acquire := func(l *lock.Locker, id string) *lock.Lease {
		t.Helper()
		actx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		lease, err := l.Acquire(actx, id)
		if err != nil {
			t.Fatalf("acquiring %s: %v", id, err)
		}
		return lease
	}
	suffix := time.Now().UnixNano()
	restored, held := fmt.Sprintf("raise/restored-%d", suffix), fmt.Sprintf("raise/held-%d", suffix)

	// A backup taken after the first grant of restored, then two more grants.
	a := locker("a")
	first := acquire(a, restored)
	backup, _, err := store.Load(ctx, restored, true)
	if err != nil {
		t.Fatal(err)
	}
	first.Release(ctx)
	acquire(a, restored).Release(ctx)
	last := acquire(a, restored)
	highest := last.Token()
	last.Release(ctx)

	// The restore: the backed-up record comes back, and the next grant repeats a token.
	restore := func() {
		t.Helper()
		if err := session.Query(`INSERT INTO `+raiseKeyspace+`.lock_owners (lock_id, owner, fencing_token, version, lease_ms, revoked, granted_at, renewed_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?)`, restored, backup.Owner, backup.Token, backup.Version, backup.Lease.Milliseconds(),
			backup.Revoked, backup.GrantedAt, backup.RenewedAt).ExecContext(ctx); err != nil {
			t.Fatal(err)
		}
	}
	restore()
	again := acquire(a, restored)
	t.Logf("after the restore, without raise-tokens: token %d granted again (highest before: %d)", again.Token(), highest)
	if again.Token() > highest {
		t.Fatalf("token %d after a restore, above the highest %d: the test's restore did not roll the record back", again.Token(), highest)
	}
	again.Release(ctx)
	restore()

	// A holder that keeps running through the raise (the procedure stops it; this one was missed).
	h := locker("h")
	holding := acquire(h, held)
	floor := max(highest, holding.Token()) + 1_000_000
	hosts := strings.Join(cl.Hosts(), ",")
	args := func(extra ...string) []string {
		return append([]string{"raise-tokens", "--cassandra-hosts", hosts, "--cassandra-keyspace", raiseKeyspace}, extra...)
	}

	dry := runCLI(t, &invocation{args: args("--floor", fmt.Sprint(floor), "--dry-run")})
	if dry.code != 0 || !strings.Contains(dry.stdout.String(), fmt.Sprintf("%s: token %d -> %d, held by %s", restored, backup.Token, floor, backup.Owner)) ||
		!strings.Contains(dry.stdout.String(), "(dry run)") {
		t.Fatalf("dry run: exit %d, stdout %q, stderr %q", dry.code, dry.stdout.String(), dry.stderr.String())
	}
	if rec, _, _ := store.Load(ctx, restored, true); rec.Token != backup.Token {
		t.Fatalf("--dry-run wrote: token %d, want %d", rec.Token, backup.Token)
	}

	raised := runCLI(t, &invocation{args: args("--floor", fmt.Sprint(floor))})
	t.Logf("baton raise-tokens:\n%s", raised.stdout.String())
	if raised.code != 0 {
		t.Fatalf("raise-tokens: exit %d, stderr %q", raised.code, raised.stderr.String())
	}
	for _, want := range []string{
		fmt.Sprintf("%s: token %d -> %d, held by %s", restored, backup.Token, floor, backup.Owner),
		fmt.Sprintf("%s: token %d -> %d, held by %s", held, holding.Token(), floor, holding.Owner().String()),
	} {
		if !strings.Contains(raised.stdout.String(), want) {
			t.Errorf("raise-tokens printed %q; want a line %q", raised.stdout.String(), want)
		}
	}

	// The running holder loses the lock at its next renewal; a waiter is granted after that.
	waited := make(chan *lock.Lease, 1)
	var grantedAt time.Time
	go func() {
		actx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		l, err := locker("w").Acquire(actx, held)
		grantedAt = time.Now()
		if err != nil {
			t.Errorf("waiter: %v", err)
		}
		waited <- l
	}()
	select {
	case <-holding.Done():
	case <-time.After(2 * leaseDur):
		t.Fatal("the holder of the raised record still holds it two leases later")
	}
	lostAt := time.Now()
	if !errors.Is(holding.Err(), lock.ErrOwnershipLost) {
		t.Errorf("the holder lost the lock with %v, want ErrOwnershipLost", holding.Err())
	}
	w := <-waited
	if w == nil {
		t.FailNow()
	}
	defer w.Release(ctx)
	if w.Token() != floor+1 {
		t.Errorf("the waiter got token %d, want %d (the floor + 1)", w.Token(), floor+1)
	}
	if ended := holding.EndedAt(); !grantedAt.After(ended) {
		t.Errorf("the waiter was granted at %v, before the holder's lease ended at %v", grantedAt, ended)
	}
	t.Logf("the holder lost the raised lock; the waiter was granted token %d %v after the loss was seen", w.Token(), grantedAt.Sub(lostAt).Round(time.Millisecond))

	next := acquire(a, restored)
	defer next.Release(ctx)
	if next.Token() != floor+1 {
		t.Errorf("the next grant of the restored lock: token %d, want %d (the floor + 1, above %d)", next.Token(), floor+1, highest)
	}

	lower := runCLI(t, &invocation{args: args("--floor", fmt.Sprint(floor-10), "--lock", restored)})
	if lower.code != 0 || !strings.Contains(lower.stdout.String(), fmt.Sprintf("%s: token %d, at or above the floor: left alone", restored, floor+1)) {
		t.Errorf("a lower floor: exit %d, stdout %q, stderr %q", lower.code, lower.stdout.String(), lower.stderr.String())
	}
}

// TestRaiseTokensFlags: the flags raise-tokens needs, refused with a message that says what to give.
func TestRaiseTokensFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"raise-tokens", "--cassandra-hosts", "127.0.0.1"}, "--floor is required"},
		{[]string{"raise-tokens", "--floor", "soon", "--cassandra-hosts", "127.0.0.1"}, `--floor "soon": want a token`},
		{[]string{"raise-tokens", "--floor", "now"}, "--cassandra-hosts (BATON_CASSANDRA_HOSTS) is required"},
		{[]string{"raise-tokens", "--floor", "5", "--cassandra-hosts", "127.0.0.1", "--lock", "a b"}, `--lock "a b"`},
	} {
		inv := runCLI(t, &invocation{args: tc.args})
		if inv.code != ExitUsage || !strings.Contains(inv.stderr.String(), tc.want) {
			t.Errorf("baton %s: exit %d, stderr %q; want 2 and %q", strings.Join(tc.args, " "), inv.code, inv.stderr.String(), tc.want)
		}
	}
}
