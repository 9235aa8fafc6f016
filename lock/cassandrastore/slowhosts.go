package cassandrastore

import (
	"context"
	"errors"
	"slices"
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
// the ones that left a request unanswered (on a machine so loaded that every node answers late, a
// hung node still comes last), and within each kind the one marked longest ago comes first: the
// host that failed last is tried last. That order matters once every host the session can use is
// marked. A quorum loss marks every coordinator a session tries, and only those it uses again are
// cleared; a node that just restarted may not be in use yet (ReconnectInterval). When the
// partition's first replica then hung, the inner plan's order sent it every request until the
// lease ran out (issue 22: a sidecar lost both its locks 3.9 s into such a hang).
//
// It only reorders hosts: no request is retried or sent twice (a lightweight transaction never
// is; an unknown outcome is settled by the lock, rule 5). It is also the session's query observer,
// from which it learns answer times.
type slowHostPolicy struct {
	gocql.HostSelectionPolicy
	newInner  func() gocql.HostSelectionPolicy
	localOnly bool
	now       func() time.Time
	inited    bool

	mu       sync.Mutex
	slow     map[string]slowness  // host (address:port) → how and until when it is avoided
	answered map[string]time.Time // host → when it last answered promptly
}

// slowness is why and until when a coordinator comes late in query plans.
type slowness struct {
	until      time.Time // marked at until − avoidSlowFor
	unanswered bool      // it left a request unanswered (else it answered late)
}

// newSlowHostPolicy wraps the policies newInner makes. With localOnly, hosts that the inner policy
// does not call local are never chosen: with LOCAL_SERIAL a coordinator in another data centre
// would run Paxos among that data centre's replicas, a second Paxos domain over the same lock.
func newSlowHostPolicy(newInner func() gocql.HostSelectionPolicy, localOnly bool, now func() time.Time) *slowHostPolicy {
	return &slowHostPolicy{HostSelectionPolicy: newInner(), newInner: newInner, localOnly: localOnly, now: now,
		slow: make(map[string]slowness), answered: make(map[string]time.Time)}
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

// avoided is a host of a plan that comes late, and why.
type avoided struct {
	host gocql.SelectedHost
	slowness
}

// Pick implements gocql.HostSelectionPolicy: the wrapped plan with slow hosts moved to its end,
// those that answered late before those that left a request unanswered, each kind in the order
// they were marked (the inner plan's order among hosts marked at the same time).
func (p *slowHostPolicy) Pick(stmt gocql.ExecutableStatement) gocql.NextHost {
	next := p.HostSelectionPolicy.Pick(stmt)
	var avoid []avoided
	exhausted := false
	return func() gocql.SelectedHost {
		for !exhausted {
			h := next()
			if h == nil {
				exhausted = true
				// Late answers first, then unanswered requests; the oldest mark first in each.
				slices.SortStableFunc(avoid, func(a, b avoided) int {
					if a.unanswered != b.unanswered {
						if a.unanswered {
							return 1
						}
						return -1
					}
					return a.until.Compare(b.until)
				})
				break
			}
			if p.localOnly && h.Info() != nil && !p.HostSelectionPolicy.IsLocal(h.Info()) {
				continue
			}
			slow, ok := p.slowness(h.Info())
			if !ok {
				return h
			}
			avoid = append(avoid, avoided{h, slow})
		}
		if len(avoid) == 0 {
			return nil
		}
		h := avoid[0].host
		avoid = avoid[1:]
		return h
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
// nothing, and neither does a slow request to a coordinator that answered another one promptly
// while it waited: that coordinator is alive, and the request waited on its replicas (a QUORUM
// read that the coordinator sent to a hung replica, see SpeculativeRetry). Marking it
// would leave a session nothing but marked hosts once a node really hangs. Not guaranteed: a
// coordinator that answered just before it hung is marked only by its next unanswered request.
func (p *slowHostPolicy) ObserveQuery(_ context.Context, q gocql.ObservedQuery) {
	if q.Host == nil {
		return
	}
	host := q.Host.ConnectAddressAndPort()
	took := q.End.Sub(q.Start)
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case took < slowAnswer && q.Err == nil:
		delete(p.slow, host)
		if q.End.After(p.answered[host]) {
			p.answered[host] = q.End
		}
	case took >= slowAnswer && q.Err == nil, took >= slowUnanswered && unanswered(q.Err):
		if p.answered[host].After(q.Start) {
			return
		}
		p.slow[host] = slowness{until: p.now().Add(avoidSlowFor), unanswered: q.Err != nil}
	}
}

// unanswered reports whether err means that the coordinator did not answer in time.
func unanswered(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, gocql.ErrTimeoutNoResponse)
}
