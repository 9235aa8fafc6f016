package cassandrastore

import (
	"context"
	"net"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
)

// fixedPlan is a host policy whose every query plan is hosts, in order; hosts in remote are not
// local.
type fixedPlan struct {
	gocql.HostSelectionPolicy // nil: only Pick and IsLocal are used
	hosts                     []*gocql.HostInfo
	remote                    map[*gocql.HostInfo]bool
}

func (p fixedPlan) IsLocal(h *gocql.HostInfo) bool { return !p.remote[h] }

type pickedHost struct{ h *gocql.HostInfo }

func (p pickedHost) Info() *gocql.HostInfo { return p.h }
func (pickedHost) Mark(error)              {}

func (p fixedPlan) Pick(gocql.ExecutableStatement) gocql.NextHost {
	i := 0
	return func() gocql.SelectedHost {
		if i == len(p.hosts) {
			return nil
		}
		i++
		return pickedHost{p.hosts[i-1]}
	}
}

// testHosts returns hosts at the given addresses, port 9042.
func testHosts(t *testing.T, ips ...string) []*gocql.HostInfo {
	t.Helper()
	var hosts []*gocql.HostInfo
	for _, ip := range ips {
		h, err := gocql.NewHostInfoFromAddrPort(net.ParseIP(ip), 9042)
		if err != nil {
			t.Fatal(err)
		}
		hosts = append(hosts, h)
	}
	return hosts
}

func plan(p *slowHostPolicy) []string {
	var out []string
	next := p.Pick(nil)
	for h := next(); h != nil; h = next() {
		out = append(out, h.Info().ConnectAddress().String())
	}
	return out
}

// TestSlowHostsComeLast: a coordinator that left a request unanswered until its deadline, or
// answered after slowAnswer, moves to the end of every plan for avoidSlowFor, one that answered
// late before one that did not answer; a prompt answer, the end of that time, or a request its
// caller gave up early changes that as they should.
func TestSlowHostsComeLast(t *testing.T) {
	hosts := testHosts(t, "198.18.0.1", "198.18.0.2", "198.18.0.3")
	now := time.Unix(1_700_000_000, 0)
	p := newSlowHostPolicy(func() gocql.HostSelectionPolicy { return fixedPlan{hosts: hosts} }, false, func() time.Time { return now })
	observe := func(h *gocql.HostInfo, took time.Duration, err error) {
		p.ObserveQuery(context.Background(), gocql.ObservedQuery{Host: h, Start: now.Add(-took), End: now, Err: err})
	}
	check := func(step string, want ...string) {
		t.Helper()
		if got := plan(p); len(got) != len(want) || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
			t.Errorf("%s: plan %v, want %v", step, got, want)
		}
	}
	check("at first", "198.18.0.1", "198.18.0.2", "198.18.0.3")
	observe(hosts[0], slowUnanswered, context.DeadlineExceeded)
	check("after a timeout on the first", "198.18.0.2", "198.18.0.3", "198.18.0.1")
	observe(hosts[1], 2*time.Millisecond, context.DeadlineExceeded) // its caller's deadline, not the host
	observe(hosts[1], 300*time.Millisecond, context.Canceled)
	observe(hosts[1], slowAnswer/2, nil) // slowish, but answered
	check("after requests cut short by their callers", "198.18.0.2", "198.18.0.3", "198.18.0.1")
	observe(hosts[2], 3*time.Second, nil) // a late answer: the node was hung and resumed, or is loaded
	check("after a late answer on the third", "198.18.0.2", "198.18.0.3", "198.18.0.1")
	now = now.Add(2 * slowAnswer) // past the second's answers above
	observe(hosts[1], slowAnswer, gocql.ErrTimeoutNoResponse)
	// The one that answered late comes first, then those that did not answer, in plan order.
	check("with every host slow", "198.18.0.3", "198.18.0.1", "198.18.0.2")
	observe(hosts[1], 5*time.Millisecond, nil)
	check("after a prompt answer on the second", "198.18.0.2", "198.18.0.3", "198.18.0.1")
	now = now.Add(avoidSlowFor)
	check("once the others' time is up", "198.18.0.1", "198.18.0.2", "198.18.0.3")
}

// TestHostMarkedLastComesLast replays, on a fake clock, the plans of the session that lost its
// locks in issue 22's chaos run (lease 5 s): quorum was lost, so every coordinator it tried was
// marked; after quorum came back the lock's primary replica answered and was cleared, the other
// live node stayed marked, and a restarted node was not used yet. Then the primary replica hung.
// The plan must now start with the node marked during the quorum loss, not with the hung node
// marked last: in the inner plan's order every renewal went to the hung primary replica until the
// lease ran out.
func TestHostMarkedLastComesLast(t *testing.T) {
	hosts := testHosts(t, "198.18.0.1", "198.18.0.3") // primary replica first; 198.18.0.2 restarting
	now := time.Unix(1_700_000_000, 0)
	p := newSlowHostPolicy(func() gocql.HostSelectionPolicy { return fixedPlan{hosts: hosts} }, false, func() time.Time { return now })
	observe := func(h *gocql.HostInfo, took time.Duration, err error) {
		p.ObserveQuery(context.Background(), gocql.ObservedQuery{Host: h, Start: now.Add(-took), End: now, Err: err})
	}
	const timeout = 833 * time.Millisecond // the request timeout at lease 5 s
	// Quorum lost: both time out.
	observe(hosts[0], timeout, context.DeadlineExceeded)
	now = now.Add(time.Second)
	observe(hosts[1], timeout, context.DeadlineExceeded)
	// Quorum back: the primary replica answers and is cleared.
	now = now.Add(5 * time.Second)
	observe(hosts[0], 20*time.Millisecond, nil)
	if got := plan(p); got[0] != "198.18.0.1" {
		t.Fatalf("quorum back: plan %v, want the primary replica first", got)
	}
	// 20 s later (a node was killed and restarted meanwhile) the primary replica hangs.
	now = now.Add(20 * time.Second)
	observe(hosts[0], timeout, context.DeadlineExceeded)
	now = now.Add(400 * time.Millisecond)
	if got := plan(p); len(got) != 2 || got[0] != "198.18.0.3" || got[1] != "198.18.0.1" {
		t.Fatalf("primary replica hung: plan %v, want [198.18.0.3 198.18.0.1]: the host that failed last comes last", got)
	}
	// Marks set at the same time keep the inner plan's order.
	q := newSlowHostPolicy(func() gocql.HostSelectionPolicy { return fixedPlan{hosts: hosts} }, false, func() time.Time { return now })
	for _, h := range hosts {
		q.ObserveQuery(context.Background(), gocql.ObservedQuery{Host: h, Start: now.Add(-timeout), End: now, Err: context.DeadlineExceeded})
	}
	if got := plan(q); got[0] != "198.18.0.1" {
		t.Errorf("marked at once: plan %v, want the inner order", got)
	}
}

// TestAnsweringCoordinatorIsNotMarked: a request that went unanswered (or answered late) while its
// coordinator answered another one promptly waited on the coordinator's replicas (issue 22: QUORUM
// reads that a live coordinator sent to a hung replica), and does not mark the coordinator; one
// sent after the coordinator's last answer does.
func TestAnsweringCoordinatorIsNotMarked(t *testing.T) {
	hosts := testHosts(t, "198.18.0.1", "198.18.0.3")
	now := time.Unix(1_700_000_000, 0)
	p := newSlowHostPolicy(func() gocql.HostSelectionPolicy { return fixedPlan{hosts: hosts} }, false, func() time.Time { return now })
	const timeout = 833 * time.Millisecond
	read := gocql.ObservedQuery{Host: hosts[0], Start: now, End: now.Add(timeout), Err: context.DeadlineExceeded}
	late := gocql.ObservedQuery{Host: hosts[0], Start: now, End: now.Add(2 * slowAnswer)}
	cas := gocql.ObservedQuery{Host: hosts[0], Start: now.Add(100 * time.Millisecond), End: now.Add(120 * time.Millisecond)}
	now = now.Add(2 * slowAnswer)
	p.ObserveQuery(context.Background(), cas)
	p.ObserveQuery(context.Background(), read)
	p.ObserveQuery(context.Background(), late)
	if got := plan(p); got[0] != "198.18.0.1" {
		t.Fatalf("after a slow read while the coordinator answered: plan %v, want it still first", got)
	}
	p.ObserveQuery(context.Background(), gocql.ObservedQuery{Host: hosts[0], Start: now, End: now.Add(timeout), Err: context.DeadlineExceeded})
	if got := plan(p); got[0] != "198.18.0.3" {
		t.Fatalf("after a request unanswered since its last answer: plan %v, want it last", got)
	}
}

// TestLocalOnlyNeverLeavesTheDataCentre: with a data-centre local consistency (LOCAL_SERIAL: Paxos
// among the coordinator's data centre) a host of another data centre is never chosen, not even
// when every local host is slow; without it, remote hosts come after the local ones as before.
func TestLocalOnlyNeverLeavesTheDataCentre(t *testing.T) {
	hosts := testHosts(t, "198.18.0.1", "198.18.0.2", "198.18.1.1")
	inner := func() gocql.HostSelectionPolicy {
		return fixedPlan{hosts: hosts, remote: map[*gocql.HostInfo]bool{hosts[2]: true}}
	}
	now := time.Unix(1_700_000_000, 0)
	for _, localOnly := range []bool{true, false} {
		p := newSlowHostPolicy(inner, localOnly, func() time.Time { return now })
		for _, h := range hosts[:2] {
			p.ObserveQuery(context.Background(), gocql.ObservedQuery{Host: h, Start: now.Add(-time.Second), End: now, Err: context.DeadlineExceeded})
		}
		got := plan(p)
		want := []string{"198.18.1.1", "198.18.0.1", "198.18.0.2"}
		if localOnly {
			want = []string{"198.18.0.1", "198.18.0.2"}
		}
		if len(got) != len(want) || got[0] != want[0] {
			t.Errorf("local only %v, every local host slow: plan %v, want %v", localOnly, got, want)
		}
	}
}
