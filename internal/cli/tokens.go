package cli

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/baton-dev/baton/internal/cassandraflags"
	"github.com/baton-dev/baton/internal/sidecarcontract"
	"github.com/baton-dev/baton/lock"
	"github.com/baton-dev/baton/lock/cassandrastore"
)

// raiseTokensUsage is the usage of baton raise-tokens.
func raiseTokensUsage() string {
	var b strings.Builder
	b.WriteString(`Usage: baton raise-tokens --floor N|now --cassandra-hosts HOSTS [--cassandra-keyspace baton]
                          [Cassandra settings] [--lock ID]... [--dry-run]

After a restore of baton's keyspace from a backup: raises the fencing token of every lock whose
token is below --floor to --floor, so that the next grant of each lock gets a token above every
token it issued before the backup was restored (a restore rolls tokens back, and the resource you
protect would see repeated tokens). Stop every sidecar and 'baton run' of the keyspace first
(docs/operations.md, Backup and restore).

Each raise is a conditional write of the owner record, like every write of the lock: the record
keeps its holder and lease, so a holder that is still running loses the lock at its next renewal
(it fences itself), and the next waiter is granted only after watching the raised record for a
full lease, with token --floor + 1. Locks at or above --floor are left alone. Prints one line per
lock: its ID, the token before and after, and its holder.

--floor is a token above every token issued before the restore: the highest token the resources
you protect have seen, or Prometheus's max_over_time(baton_distributedlock_token[...]) over the
time since the backup, plus one. "now" takes this machine's clock in microseconds, which is what a
new lock starts at: above every earlier token unless a lock was created on a machine whose clock
was ahead of this one, or was granted more than once a microsecond on average.

Flags:
  --floor N|now        the lowest token to leave behind (required)
  --lock ID            only this lock; may be repeated (default: every lock of the keyspace)
  --dry-run            print what would be raised; write nothing

Cassandra settings (a flag wins over its environment variable):
`)
	sidecarcontract.WriteUsage(&b, sidecarcontract.CassandraSettings()...)
	return b.String()
}

// Bounds of raise-tokens.
const (
	raiseAttempts = 5                      // conditional writes per lock before giving up on it
	raiseBackoff  = 200 * time.Millisecond // pause between them
	listTimeout   = 30 * time.Second       // reading the keyspace's lock IDs
)

// raiseTokensOptions are the checked flags of raise-tokens.
type raiseTokensOptions struct {
	floor     int64
	locks     []string
	dryRun    bool
	cassandra cassandrastore.Connection
}

// raiseTokens raises the fencing token of every lock (or of each --lock) below --floor to --floor.
// It exits 1 when a lock could not be raised (the others are raised still).
func (p *program) raiseTokens(ctx context.Context, args []string) (int, error) {
	o, err := p.raiseTokensFlags(args)
	if err != nil {
		return ExitUsage, err
	}
	store, session, closeSession, err := openAdminStore(ctx, o.cassandra)
	if err != nil {
		return ExitFailure, err
	}
	defer closeSession()
	ids := o.locks
	if len(ids) == 0 {
		lctx, cancel := context.WithTimeout(ctx, listTimeout)
		ids, err = lockIDs(lctx, session, o.cassandra.Keyspace)
		cancel()
		if err != nil {
			return ExitFailure, err
		}
	}
	fmt.Fprintf(p.stdout, "floor %d, %d lock(s) in keyspace %s%s\n", o.floor, len(ids), o.cassandra.Keyspace, map[bool]string{true: " (dry run)"}[o.dryRun])
	failed := 0
	for _, id := range ids {
		line, err := raiseToken(ctx, store, id, o.floor, o.dryRun)
		if err != nil {
			failed++
			fmt.Fprintf(p.stderr, "baton: lock %s: %v\n", id, err)
			continue
		}
		fmt.Fprintln(p.stdout, line)
	}
	if failed > 0 {
		return ExitFailure, fmt.Errorf("%d of %d lock(s) not raised: run baton raise-tokens again (raised locks are left alone)", failed, len(ids))
	}
	return ExitOK, nil
}

// raiseTokensFlags reads and checks the flags of raise-tokens. It does not contact Cassandra.
func (p *program) raiseTokensFlags(args []string) (raiseTokensOptions, error) {
	var o raiseTokensOptions
	fs := newFlagSet("raise-tokens")
	floor := fs.String("floor", "", "the lowest token to leave behind, or now")
	fs.Var(listValue{&o.locks}, "lock", "only this lock")
	fs.BoolVar(&o.dryRun, "dry-run", false, "write nothing")
	cassandra := sidecarcontract.Register(fs, p.env, sidecarcontract.CassandraSettings()...)
	if _, err := parseFlags(fs, "raise-tokens", args, false); err != nil {
		return o, err
	}
	switch f := strings.TrimSpace(*floor); f {
	case "":
		return o, usagef("raise-tokens", "--floor is required: a token above every token issued before the restore, or now")
	case "now":
		o.floor = lock.FirstToken(time.Now())
	default:
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil || n < 1 {
			return o, usagef("raise-tokens", "--floor %q: want a token (a whole number of at least 1) or now", f)
		}
		o.floor = n
	}
	for _, id := range o.locks {
		if err := lock.ValidateLockID(id); err != nil {
			return o, usagef("raise-tokens", "--lock %q: %v", id, err)
		}
	}
	if cassandra.Get(sidecarcontract.CassandraHosts) == "" {
		return o, usagef("raise-tokens", "%s is required: the Cassandra whose keyspace was restored", sidecarcontract.CassandraHosts)
	}
	var errs []error
	if o.cassandra, errs = cassandraflags.Read(cassandra); len(errs) > 0 {
		return o, usagef("raise-tokens", "%s", problems(errs))
	}
	return o, nil
}

// raiseToken raises lockID's token to floor when it is lower, with a conditional write on the
// record read by a linearizable read, and returns the line to print. A write that did not apply or
// whose outcome is unknown is settled by the next attempt's linearizable read (rule 5).
//
// What it does not guarantee: that no process granted the lock between the read and the write
// (the write then does not apply, and the next attempt reads the new grant, whose token may
// already be above floor).
func raiseToken(ctx context.Context, store lock.Store, lockID string, floor int64, dryRun bool) (string, error) {
	var lastErr error
	for attempt := range raiseAttempts {
		if attempt > 0 {
			t := time.NewTimer(raiseBackoff)
			select {
			case <-ctx.Done():
				t.Stop()
				return "", ctx.Err()
			case <-t.C:
			}
		}
		rec, ok, err := store.Load(ctx, lockID, true)
		switch {
		case err != nil:
			lastErr = fmt.Errorf("reading its owner record: %w", err)
			continue
		case !ok:
			return fmt.Sprintf("%s: no owner record; its first grant starts at the creating machine's clock", lockID), nil
		case rec.Token >= floor:
			return fmt.Sprintf("%s: token %d, at or above the floor: left alone", lockID, rec.Token), nil
		case dryRun:
			return fmt.Sprintf("%s: token %d -> %d%s (dry run)", lockID, rec.Token, floor, holderNote(rec)), nil
		}
		next := rec
		next.Token, next.Version = floor, rec.Version+1
		applied, _, _, err := store.CompareAndSwap(ctx, lockID, rec, next)
		if err == nil && applied {
			return fmt.Sprintf("%s: token %d -> %d%s", lockID, rec.Token, floor, holderNote(rec)), nil
		}
		lastErr = err
		if err == nil {
			lastErr = errors.New("the owner record changed while it was raised")
		}
	}
	return "", fmt.Errorf("not raised after %d attempts: %w", raiseAttempts, lastErr)
}

// holderNote names the record's holder, whom the raise takes the lock from at its next renewal.
func holderNote(rec lock.Record) string {
	if !rec.Held() {
		return ", free"
	}
	return fmt.Sprintf(", held by %s (it loses the lock at its next renewal; the next grant waits a lease)", rec.Owner)
}

// openAdminStore connects to Cassandra once, without retries, and opens the lock store on the
// existing schema; closeSession closes the session, waiting at most closeTimeout.
func openAdminStore(ctx context.Context, conn cassandrastore.Connection) (*cassandrastore.Store, *gocql.Session, func(), error) {
	cc, err := conn.ClusterConfig()
	if err != nil {
		return nil, nil, nil, fmt.Errorf("connecting to %s: %w", conn, err)
	}
	cc.Timeout, cc.ConnectTimeout = cassandraTimeout, cassandraTimeout
	session, err := cc.CreateSession()
	if err != nil {
		return nil, nil, nil, fmt.Errorf("cannot connect to Cassandra at %s: %w; check %s%s",
			strings.Join(conn.ContactPoints, ","), err, sidecarcontract.CassandraHosts, connectHint(conn))
	}
	closeSession := func() { cassandrastore.CloseSession(session, closeTimeout) }
	store, err := cassandrastore.New(ctx, session, conn.StoreOptions()...)
	if err != nil {
		closeSession()
		return nil, nil, nil, fmt.Errorf("opening the lock store in keyspace %q: %w; check %s", conn.Keyspace, err, sidecarcontract.Keyspace)
	}
	return store, session, closeSession, nil
}

// keyspacePattern is the keyspace rule of cassandrastore: the name goes into CQL.
var keyspacePattern = regexp.MustCompile(cassandrastore.KeyspacePattern)

// lockIDs reads the ID of every owner record in keyspace, at QUORUM: every record a lock wrote
// (lightweight transactions commit on a quorum) or a restore brought back to a quorum of replicas.
// What it does not guarantee: records restored to fewer replicas than a quorum (repair first).
func lockIDs(ctx context.Context, session *gocql.Session, keyspace string) ([]string, error) {
	if !keyspacePattern.MatchString(keyspace) {
		return nil, fmt.Errorf("keyspace %q: want %s; check %s", keyspace, cassandrastore.KeyspacePattern, sidecarcontract.Keyspace)
	}
	iter := session.Query(`SELECT lock_id FROM ` + keyspace + `.lock_owners`).Consistency(gocql.Quorum).IterContext(ctx)
	var ids []string
	var id string
	for iter.Scan(&id) {
		ids = append(ids, id)
	}
	if err := iter.Close(); err != nil {
		return nil, fmt.Errorf("listing the locks of keyspace %s: %w", keyspace, err)
	}
	return ids, nil
}
