package cassandrastore

import (
	"context"
	"errors"
	"sync"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
)

const (
	// slowAnswer is how long a coordinator may take to answer (or leave a request unanswered until
	// its deadline) before it is tried last. A healthy node answers a lightweight transaction in
	// milliseconds; a hung one (a long GC pause, a stalled disk, SIGSTOP) keeps its connections
	// open and answers nothing, so the driver never marks it down.
	slowAnswer = time.Second
	// slowUnanswered is how long a request must have waited before a deadline that cut it off
	// marks its coordinator slow: requests have deadlines of their own (a lease's renewal a
	// fraction of a second at short leases), and one left unanswered that long says more than one
	// its caller gave up on at once.
	slowUnanswered = 100 * time.Millisecond
	// avoidSlowFor is how long such a coordinator is tried after every other host.
	avoidSlowFor = 30 * time.Second
)

// slowHostPolicy wraps a host selection policy: coordinators that recently took slowAnswer or
// longer come last in every query plan for avoidSlowFor, so one hung node of three costs a
// session one request, not every third one. It only reorders hosts: no request is retried or sent
// twice (a lightweight transaction never is; an unknown outcome is settled by the lock, rule 5),
// and with every host slow the plan is the wrapped policy's own. It is also the session's query
// observer, from which it learns answer times.
type slowHostPolicy struct {
	gocql.HostSelectionPolicy
	newInner  func() gocql.HostSelectionPolicy
	localOnly bool
	now       func() time.Time
	inited    bool

	mu   sync.Mutex
	slow map[string]time.Time // host (address:port) → avoided until
}

// newSlowHostPolicy wraps the policies newInner makes. With localOnly, hosts that the inner policy
// does not call local are never chosen: with LOCAL_SERIAL a coordinator in another data centre
// would run Paxos among that data centre's replicas, a second Paxos domain over the same lock.
func newSlowHostPolicy(newInner func() gocql.HostSelectionPolicy, localOnly bool, now func() time.Time) *slowHostPolicy {
	return &slowHostPolicy{HostSelectionPolicy: newInner(), newInner: newInner, localOnly: localOnly, now: now,
		slow: make(map[string]time.Time)}
}

// Init implements gocql.HostSelectionPolicy. A session that failed to start leaves its policy
// initialised, and the driver's token-aware policy refuses a second session: a later attempt with
// the same configuration (a connection retry) gets a fresh inner policy. One live session per
// configuration, as the driver requires.
func (p *slowHostPolicy) Init(s *gocql.Session) {
	if p.inited {
		p.HostSelectionPolicy = p.newInner()
	}
	p.inited = true
	p.HostSelectionPolicy.Init(s)
}

// Pick implements gocql.HostSelectionPolicy: the wrapped plan with slow hosts moved to its end.
func (p *slowHostPolicy) Pick(stmt gocql.ExecutableStatement) gocql.NextHost {
	next := p.HostSelectionPolicy.Pick(stmt)
	var later []gocql.SelectedHost
	exhausted := false
	return func() gocql.SelectedHost {
		for !exhausted {
			h := next()
			if h == nil {
				exhausted = true
				break
			}
			if p.localOnly && h.Info() != nil && !p.HostSelectionPolicy.IsLocal(h.Info()) {
				continue
			}
			if p.isSlow(h.Info()) {
				later = append(later, h)
				continue
			}
			return h
		}
		if len(later) == 0 {
			return nil
		}
		h := later[0]
		later = later[1:]
		return h
	}
}

func (p *slowHostPolicy) isSlow(h *gocql.HostInfo) bool {
	if h == nil {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	until, ok := p.slow[h.ConnectAddressAndPort()]
	if ok && !p.now().Before(until) {
		delete(p.slow, h.ConnectAddressAndPort())
		return false
	}
	return ok
}

// ObserveQuery implements gocql.QueryObserver: an answer that took slowAnswer or longer, or a
// request left unanswered for slowUnanswered until its deadline, marks its coordinator slow; a
// prompt answer clears it. A request its caller cancelled, or whose deadline came at once, says
// nothing.
func (p *slowHostPolicy) ObserveQuery(_ context.Context, q gocql.ObservedQuery) {
	if q.Host == nil {
		return
	}
	took := q.End.Sub(q.Start)
	switch {
	case took >= slowAnswer && q.Err == nil, took >= slowUnanswered && unanswered(q.Err):
		p.mu.Lock()
		p.slow[q.Host.ConnectAddressAndPort()] = p.now().Add(avoidSlowFor)
		p.mu.Unlock()
	case took < slowAnswer && q.Err == nil:
		p.mu.Lock()
		delete(p.slow, q.Host.ConnectAddressAndPort())
		p.mu.Unlock()
	}
}

// unanswered reports whether err means that the coordinator did not answer in time.
func unanswered(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, gocql.ErrTimeoutNoResponse)
}
