package main_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/baton-dev/baton/internal/testing/testenv"
	"github.com/baton-dev/baton/lock/cassandrastore"
	"github.com/baton-dev/baton/sidecarclient"
)

// Store load budgets of one idle lock at the default lease with hints working, in requests per
// second of a sidecar process as Cassandra counts them (issue 26; docs/design.md, the poll
// schedule): the holder, the head of the queue, every other waiter.
const (
	budgetHolder = 0.3
	budgetHead   = 1.0
	budgetWaiter = 0.2
	// driverHeartbeat is how often gocql v2.1.2 sends a heartbeat (OPTIONS) on every connection
	// (two at a time on the control connection), with no setting to change it: one pool connection
	// and the control connection cost an idle session 0.6 requests/s on one node.
	driverHeartbeat = 5 * time.Second
)

// driverFloorLimit bounds what an idle session with conns connections may send in a window of
// length took: at most floor(took/5 s)+1 heartbeats on each connection (a window catches one more
// than its length holds whenever it starts just before one), twice that on the control connection.
// A fixed rate with a tenth's margin (0.66/s over 30 s) failed whenever the window caught the
// extra heartbeat of one connection (0.7/s); this counts heartbeats, not a rate.
func driverFloorLimit(conns int, took time.Duration) float64 {
	beats := int(took/driverHeartbeat) + 1
	return float64((conns+1)*beats) / took.Seconds()
}

// TestIdleLockStoreLoad is the store-load regression check of make test: three sidecar processes
// on one lock at the default lease (15 s), hints over UDP, one holding and two waiting. Over a
// 30 s window it counts each process's requests the way Cassandra does, from the request_count
// of its connections in system_views.clients (heartbeats and the driver's own reads included),
// and counts an idle session of the same driver configuration beside them. It fails when a
// process's requests beyond that driver floor exceed twice its role's budget, or when the driver
// floor itself grows. The totals against the budgets are logged: with the driver's heartbeats
// they exceed the holder's and the other waiter's budgets (see driverHeartbeat).
func TestIdleLockStoreLoad(t *testing.T) {
	const (
		settle = 5 * time.Second
		window = 30 * time.Second
	)
	ns := fmt.Sprintf("load-%d", time.Now().UnixNano())
	cl := storeReady(t)
	port := testenv.FreePort(t)
	roles := []string{"holder", "head", "waiter"}
	budgets := []float64{budgetHolder, budgetHead, budgetWaiter}
	var procs []*sidecarProc
	for i, role := range roles {
		p := startSidecar(t, ns, role, fmt.Sprintf("POD_IP=127.0.0.%d", 21+i), fmt.Sprintf("BATON_HINT_PORT=%d", port),
			"BATON_HINT_ALLOW_LOOPBACK=true", "BATON_LEASE=15s")
		procs = append(procs, p)
		want := sidecarclient.StateWaiting
		if i == 0 {
			want = sidecarclient.StateHeld
		}
		// Each process in its state before the next starts, so that they queue in this order.
		testenv.WaitFor(t, role+" to be "+string(want), 30*time.Second, func() bool {
			s, err := p.client.Lock(context.Background(), "orders")
			return err == nil && s.State == want
		})
	}
	idle := idleSession(t, cl.Hosts())
	time.Sleep(settle) // past the first steps of the waiters (not synchronisation: a measurement's start)

	conns := func() map[string]int64 { return clientRequests(t) }
	ports := make([]map[int]bool, len(procs))
	for i, p := range procs {
		ports[i] = processPorts(t, p.cmd.Process.Pid)
	}
	before := conns()
	start := time.Now()
	time.Sleep(window) // the measurement window
	after := conns()
	took := time.Since(start).Seconds()
	for i, p := range procs {
		if again := processPorts(t, p.cmd.Process.Pid); !samePorts(again, ports[i]) {
			t.Fatalf("%s opened or closed connections during the window (%v, then %v): the counts are incomplete", p.name, ports[i], again)
		}
	}
	rate := func(ps map[int]bool) (float64, int) {
		var n int64
		found := 0
		for key, c := range after {
			_, portStr, _ := strings.Cut(key, "|")
			port, _ := strconv.Atoi(portStr)
			if ps[port] {
				n += c - before[key]
				found++
			}
		}
		return float64(n) / took, found
	}
	floor, floorConns := rate(idle)
	if floorConns == 0 {
		t.Fatal("the idle session's connections are not in system_views.clients")
	}
	limit := driverFloorLimit(floorConns, time.Duration(took*float64(time.Second)))
	t.Logf("idle driver session: %.2f requests/s over %d connections (limit %.2f: its heartbeats)", floor, floorConns, limit)
	if floor > limit {
		t.Errorf("an idle session of the store's driver configuration costs %.2f requests/s; want at most %.2f (its heartbeats)", floor, limit)
	}
	var total float64
	for i, p := range procs {
		r, n := rate(ports[i])
		total += r
		if n == 0 {
			t.Fatalf("%s: none of its connections %v is in system_views.clients", p.name, ports[i])
		}
		own := r - floor
		t.Logf("%-6s %.2f requests/s over %d connections: %.2f beyond the driver floor (budget %.2f, the check allows %.2f); total against the budget: %s",
			p.name, r, n, own, budgets[i], 2*budgets[i], verdict(r, budgets[i]))
		if own > 2*budgets[i] {
			t.Errorf("%s: %.2f requests/s beyond the driver floor, more than twice its budget %.2f", p.name, own, budgets[i])
		}
	}
	t.Logf("the lock: %.2f requests/s in total (budget %.2f)", total, budgetHolder+budgetHead+budgetWaiter)
}

func verdict(rate, budget float64) string {
	if rate <= budget {
		return "met"
	}
	return fmt.Sprintf("missed by %.2f", rate-budget)
}

// idleSession opens a session with the lock store's driver configuration (as the sidecar makes
// it) that sends nothing, and returns the local ports of its connections.
func idleSession(t *testing.T, hosts []string) map[int]bool {
	t.Helper()
	pid := os.Getpid()
	before := processPorts(t, pid)
	cc, err := cassandrastore.Connection{ContactPoints: hosts, Keyspace: keyspace}.ClusterConfig()
	if err != nil {
		t.Fatal(err)
	}
	s, err := cc.CreateSession()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cassandrastore.CloseSession(s, 10*time.Second) })
	var ports map[int]bool
	testenv.WaitFor(t, "the idle session's pool to fill", 10*time.Second, func() bool {
		ports = map[int]bool{}
		for p := range processPorts(t, pid) {
			if !before[p] {
				ports[p] = true
			}
		}
		return len(ports) >= 1+cc.NumConns*len(hosts) // the control connection and the pool
	})
	return ports
}

// clientRequests reads system_views.clients: request_count per connection, keyed "address|port".
func clientRequests(t *testing.T) map[string]int64 {
	t.Helper()
	iter := cassandra.Session(t).Query(`SELECT address, port, request_count FROM system_views.clients`).
		Consistency(gocql.One).Iter()
	out := map[string]int64{}
	var (
		addr  net.IP
		port  int
		count int64
	)
	for iter.Scan(&addr, &port, &count) {
		out[addr.String()+"|"+strconv.Itoa(port)] = count
	}
	if err := iter.Close(); err != nil {
		t.Fatalf("reading system_views.clients: %v", err)
	}
	return out
}

// processPorts returns the local ports of pid's TCP connections (Linux: its socket descriptors in
// /proc, matched to /proc/net/tcp by inode).
func processPorts(t *testing.T, pid int) map[int]bool {
	t.Helper()
	fds, err := filepath.Glob(fmt.Sprintf("/proc/%d/fd/*", pid))
	if err != nil {
		t.Fatal(err)
	}
	inodes := map[string]bool{}
	for _, fd := range fds {
		if link, err := os.Readlink(fd); err == nil {
			if ino, ok := strings.CutPrefix(link, "socket:["); ok {
				inodes[strings.TrimSuffix(ino, "]")] = true
			}
		}
	}
	ports := map[int]bool{}
	for _, table := range []string{"tcp", "tcp6"} {
		f, err := os.Open(fmt.Sprintf("/proc/%d/net/%s", pid, table))
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode; state 01 is ESTABLISHED
			if len(fields) < 10 || fields[3] != "01" || !inodes[fields[9]] {
				continue
			}
			_, hexPort, _ := strings.Cut(fields[1], ":")
			if p, err := strconv.ParseInt(hexPort, 16, 32); err == nil {
				ports[int(p)] = true
			}
		}
		f.Close()
	}
	return ports
}

func samePorts(a, b map[int]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for p := range a {
		if !b[p] {
			return false
		}
	}
	return true
}
