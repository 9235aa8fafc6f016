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
// session one request, not every third one. Among those, the ones that answered late come before
// the ones that left a request unanswered: on a machine so loaded that every node answers late,
// a hung node still comes last. It only reorders hosts: no request is retried or sent twice (a
// lightweight transaction never is; an unknown outcome is settled by the lock, rule 5). It is also
// the session's query observer, from which it learns answer times.
type slowHostPolicy struct {
	gocql.HostSelectionPolicy
	newInner  func() gocql.HostSelectionPolicy
	localOnly bool
	now       func() time.Time
	inited    bool

	mu   sync.Mutex
	slow map[string]slowness // host (address:port) → how and until when it is avoided
}

// slowness is why and until when a coordinator comes late in query plans.
type slowness struct {
	until      time.Time
	unanswered bool // it left a request unanswered (else it answered late)
}

// newSlowHostPolicy wraps the policies newInner makes. With localOnly, hosts that the inner policy
// does not call local are never chosen: with LOCAL_SERIAL a coordinator in another data centre
// would run Paxos among that data centre's replicas, a second Paxos domain over the same lock.
func newSlowHostPolicy(newInner func() gocql.HostSelectionPolicy, localOnly bool, now func() time.Time) *slowHostPolicy {
	return &slowHostPolicy{HostSelectionPolicy: newInner(), newInner: newInner, localOnly: localOnly, now: now,
		slow: make(map[string]slowness)}
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

// Pick implements gocql.HostSelectionPolicy: the wrapped plan with slow hosts moved to its end,
// those that answered late before those that left a request unanswered.
func (p *slowHostPolicy) Pick(stmt gocql.ExecutableStatement) gocql.NextHost {
	next := p.HostSelectionPolicy.Pick(stmt)
	var late, unanswered []gocql.SelectedHost
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
			switch slow, ok := p.slowness(h.Info()); {
			case !ok:
				return h
			case slow.unanswered:
				unanswered = append(unanswered, h)
			default:
				late = append(late, h)
			}
		}
		for _, q := range []*[]gocql.SelectedHost{&late, &unanswered} {
			if len(*q) > 0 {
				h := (*q)[0]
				*q = (*q)[1:]
				return h
			}
		}
		return nil
	}
}

// slowness reports whether h is avoided now, and why.
func (p *slowHostPolicy) slowness(h *gocql.HostInfo) (slowness, bool) {
	if h == nil {
		return slowness{}, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	s, ok := p.slow[h.ConnectAddressAndPort()]
	if ok && !p.now().Before(s.until) {
		delete(p.slow, h.ConnectAddressAndPort())
		return slowness{}, false
	}
	return s, ok
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
		p.slow[q.Host.ConnectAddressAndPort()] = slowness{until: p.now().Add(avoidSlowFor), unanswered: q.Err != nil}
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
