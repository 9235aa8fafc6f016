package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"

	"github.com/baton-dev/baton/internal/sidecarcontract"
	"github.com/baton-dev/baton/lock"
	"github.com/baton-dev/baton/lock/cassandrastore"
	"github.com/baton-dev/baton/lock/hintudp"
)

// Bounds of the Cassandra work around the lock in direct mode.
const (
	cassandraTimeout = 5 * time.Second // per request, and connecting
	schemaTimeout    = 2 * time.Minute // EnsureSchema
	closeTimeout     = 5 * time.Second // CloseSession
	releaseTimeout   = 10 * time.Second
)

// runDirect runs CMD under a lock taken in Cassandra by this process, without a sidecar: it opens
// the lock store, makes the locker, acquires, runs CMD until it exits or the lease ends, and
// releases.
func (p *program) runDirect(ctx context.Context, o runOptions) (int, error) {
	log := p.directLog(o.verbose)
	store, closeSession, err := openDirectStore(ctx, o, log)
	if err != nil {
		return ExitFailure, err
	}
	defer closeSession()
	locker, owner, stopHints, code, err := p.directLocker(ctx, o, store, log)
	if err != nil {
		return code, err
	}
	defer stopHints()

	// 1. Acquire.
	lease, code, err := acquireDirect(ctx, o, locker, store)
	if err != nil {
		return code, err
	}
	log.Info("lock held", "lock", o.lockID, "token", lease.Token(), "owner", owner.String(), "since", stamp(time.Now()))

	// 2. Run CMD until it exits or the lease ends.
	res, err := p.superviseLease(ctx, o, lease)

	// 3. Release (a lost lease releases without error).
	p.releaseDirect(ctx, o, lease, log)
	switch {
	case err != nil:
		return res.code, err
	case res.lost != nil:
		return ExitTempFail, fmt.Errorf("lost lock %q (token %d) while %s ran: %v; %s", o.lockID, lease.Token(),
			o.argv[0], res.lost, stopMessage(o.argv[0], res))
	case res.atRisk:
		return ExitTempFail, fmt.Errorf("no renewal of lock %q (token %d) came while its deadline drew near (is Cassandra reachable?), so %s was stopped: %s",
			o.lockID, lease.Token(), o.argv[0], stopMessage(o.argv[0], res))
	case res.stopped && ctx.Err() != nil:
		return res.code, context.Cause(ctx)
	}
	return res.code, nil
}

// directLog is the lock's logger in direct mode: lines on stderr with --verbose, none otherwise.
func (p *program) directLog(verbose bool) logr.Logger {
	if !verbose {
		return logr.Discard()
	}
	return funcr.New(func(prefix, args string) {
		fmt.Fprintf(p.stderr, "baton: %s %s\n", prefix, args)
	}, funcr.Options{Verbosity: 1})
}

// openDirectStore connects to Cassandra (once, without retries), creates baton's schema first with
// --create-schema, and opens the lock store. Its errors say which setting to check. closeSession
// closes the session, waiting at most closeTimeout.
func openDirectStore(ctx context.Context, o runOptions, log logr.Logger) (store *cassandrastore.Store, closeSession func(), err error) {
	conn := o.cassandra
	cc, err := conn.ClusterConfig()
	if err != nil {
		return nil, nil, fmt.Errorf("connecting to %s: %w", conn, err)
	}
	cc.Timeout, cc.ConnectTimeout = cassandraTimeout, cassandraTimeout
	session, err := cc.CreateSession()
	if err != nil {
		return nil, nil, fmt.Errorf("cannot connect to Cassandra at %s: %w; check %s%s",
			strings.Join(conn.ContactPoints, ","), err, sidecarcontract.CassandraHosts, connectHint(conn))
	}
	closeSession = func() {
		if !cassandrastore.CloseSession(session, closeTimeout) {
			log.Info("closing the Cassandra session timed out; exiting anyway")
		}
	}
	if o.createSchema {
		sctx, cancel := context.WithTimeout(ctx, schemaTimeout)
		err := cassandrastore.EnsureSchema(sctx, session, conn.Keyspace, "")
		cancel()
		if err != nil {
			closeSession()
			return nil, nil, fmt.Errorf("creating baton's schema in keyspace %q: %w", conn.Keyspace, err)
		}
	}
	store, err = cassandrastore.New(ctx, session, conn.StoreOptions()...)
	switch {
	case errors.Is(err, cassandrastore.ErrSchema):
		err = fmt.Errorf("%w; create it once with --create-schema, or check %s", err, sidecarcontract.Keyspace)
	case errors.Is(err, cassandrastore.ErrClusterMismatch):
		err = fmt.Errorf("%w; check %s and %s", err, sidecarcontract.CassandraHosts, sidecarcontract.ClusterName)
	case err != nil:
		err = fmt.Errorf("opening the lock store in keyspace %q: %w", conn.Keyspace, err)
	}
	if err != nil {
		closeSession()
		return nil, nil, err
	}
	return store, closeSession, nil
}

// directLocker makes this process's owner identity and its locker on store, with the lease of
// --lease and, with --hint-addr, a hint socket that stopHints closes. A bad setting is a usage
// error (code 0).
func (p *program) directLocker(ctx context.Context, o runOptions, store lock.Store, log logr.Logger) (locker *lock.Locker,
	owner lock.Owner, stopHints func(), code int, err error) {
	owner, err = directOwner(p.pid)
	if err != nil {
		return nil, owner, nil, ExitFailure, fmt.Errorf("making the owner identity: %w", err)
	}
	stopHints = func() {}
	lockOpts := []lock.Option{lock.WithLease(o.lease), lock.WithLogger(log)}
	if o.hintAddr != "" {
		hctx, cancel := context.WithCancel(ctx)
		hinter, err := hintudp.New(hctx, hintudp.Config{Bind: o.hintAddr, AllowLoopback: o.hintLoopback, Log: log.WithName("hints")})
		if err != nil {
			cancel()
			return nil, owner, nil, ExitFailure, fmt.Errorf("listening for hand-off hints on --hint-addr %s: %w", o.hintAddr, err)
		}
		stopHints = cancel
		lockOpts = append(lockOpts, lock.WithHinter(hinter))
	}
	locker, err = lock.New(store, owner, lockOpts...)
	if err != nil {
		stopHints()
		return nil, owner, nil, 0, usagef("run", "%v", err)
	}
	return locker, owner, stopHints, 0, nil
}

// acquireDirect takes lock o.lockID: one try with --wait 0, else a wait in the queue up to --wait.
// A lock another owner holds past that is ExitTempFail, with the holder in the message.
func acquireDirect(ctx context.Context, o runOptions, locker *lock.Locker, store lock.Store) (*lock.Lease, int, error) {
	var lease *lock.Lease
	var err error
	if o.wait == 0 {
		lease, err = locker.TryAcquire(ctx, o.lockID)
	} else {
		actx, cancel := context.WithTimeout(ctx, o.wait)
		lease, err = locker.Acquire(actx, o.lockID)
		cancel()
	}
	if err == nil {
		return lease, 0, nil
	}
	switch {
	case ctx.Err() != nil:
		return nil, ExitFailure, context.Cause(ctx)
	case errors.Is(err, lock.ErrLocked) || errors.Is(err, context.DeadlineExceeded):
		after := ""
		if o.wait > 0 {
			after = fmt.Sprintf(" after waiting %v", o.wait)
		}
		return nil, ExitTempFail, fmt.Errorf("lock %q held by %s%s; not running %s (retry later or give a longer --wait)",
			o.lockID, holderOf(ctx, store, o.lockID), after, o.argv[0])
	}
	return nil, ExitFailure, fmt.Errorf("acquiring lock %q: %w", o.lockID, err)
}

// superviseLease runs CMD until it exits or lease ends (then CMD is stopped: see supervise), bounded
// by the lease's deadline.
func (p *program) superviseLease(ctx context.Context, o runOptions, lease *lock.Lease) (childResult, error) {
	lost := make(chan error, 1)
	stop := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case <-lease.Done():
			lost <- lease.Err()
		case <-stop:
		}
	}()
	spec := childSpec{argv: o.argv, grace: o.grace, env: childEnv(o.lockID, lease.Token()), deadline: lease.Deadline}
	spec.termLead, spec.killLead = deadlineLeads(o.grace, o.lease)
	res, err := p.supervise(ctx, spec, lost)
	close(stop)
	<-watched
	return res, err
}

// releaseDirect releases lease, waiting at most releaseTimeout (a failure is reported on stderr:
// the lock is freed when the lease ends), and logs whether it was released or lost before, dated
// when the lease stopped being valid, like the sidecar's lost and released events.
func (p *program) releaseDirect(ctx context.Context, o runOptions, lease *lock.Lease, log logr.Logger) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	lostBefore := lease.Err() != nil
	if rerr := lease.Release(rctx); rerr != nil {
		fmt.Fprintf(p.stderr, "baton: releasing lock %q: %v (it is freed when the lease of %v ends)\n", o.lockID, rerr, o.lease)
	}
	if lostBefore {
		log.Info("lock lost", "lock", o.lockID, "token", lease.Token(), "ended", stamp(lease.EndedAt()), "deadline", stamp(lease.Deadline()))
	} else {
		log.Info("lock released", "lock", o.lockID, "token", lease.Token(), "ended", stamp(lease.EndedAt()), "deadline", stamp(lease.Deadline()))
	}
}

// stamp formats a time for the verbose log: the wall clock with nanoseconds.
func stamp(t time.Time) string { return t.Format(time.RFC3339Nano) }

// connectHint names the settings besides the contact points that can make a connection fail.
func connectHint(conn cassandrastore.Connection) string {
	var more []string
	if conn.Username != "" {
		more = append(more, sidecarcontract.UsernameFile.String(), sidecarcontract.PasswordFile.String())
	}
	if conn.TLS != nil {
		more = append(more, sidecarcontract.TLSCA.String(), sidecarcontract.TLSServerName.String())
	}
	if conn.LocalDC != "" {
		more = append(more, sidecarcontract.LocalDC.String())
	}
	if len(more) == 0 {
		return ""
	}
	return ", " + strings.Join(more, ", ")
}

// directOwner returns this process's lock owner: identity host/<hostname>/<pid>/<random>. Host
// names and PIDs repeat across containers (PID 1, a StatefulSet's pod names in two namespaces, two
// containers of one pod), so the identity carries a random part: two live processes are never one
// owner. The CLI does not use zero-wait restart, so it never takes over another process's grant.
func directOwner(pid int) (lock.Owner, error) {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		return lock.Owner{}, fmt.Errorf("reading random bytes: %w", err)
	}
	return lock.NewOwner(fmt.Sprintf("host/%s/%d/%s", hostname(), pid, hex.EncodeToString(b[:])))
}

// holderOf names the current holder of lockID for messages, best effort.
func holderOf(ctx context.Context, store lock.Store, lockID string) string {
	ictx, cancel := context.WithTimeout(ctx, cassandraTimeout)
	defer cancel()
	st, err := lock.Inspect(ictx, store, lockID)
	switch {
	case err != nil:
		return "another owner"
	case st.Record.Held():
		who := st.Record.Owner
		if o, err := lock.ParseOwner(who); err == nil {
			who = o.Identity
		}
		return fmt.Sprintf("%s (token %d)", who, st.Record.Token)
	case len(st.Queue) > 0:
		return fmt.Sprintf("nobody, but %d waiter(s) are queued ahead", len(st.Queue))
	}
	return "another owner (it was just released: retry)"
}
