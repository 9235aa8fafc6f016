package main_test

// Process tests: the real sidecar binary, several copies, against a real Cassandra node.

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/testing/localcassandra"
	"github.com/baton-dev/baton/internal/testing/testenv"
	"github.com/baton-dev/baton/lock/cassandrastore"
	"github.com/baton-dev/baton/sidecarclient"
)

var (
	cassandra = testenv.NewCassandra(testenv.CassandraConfig("sidecar-single"))
	binary    string
)

const (
	keyspace = "baton_e2e"
	lease    = 3 * time.Second
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "baton-sidecar-bin")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "baton-sidecar")
	if out, err := exec.Command("go", "build", "-o", binary, "github.com/baton-dev/baton/cmd/sidecar").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building the sidecar: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	cassandra.Stop()
	kube.Stop()
	os.RemoveAll(dir)
	os.Exit(code)
}

var schemaOnce sync.Once

// sidecarProc is one running sidecar process.
type sidecarProc struct {
	name   string
	socket string
	cmd    *exec.Cmd
	client *sidecarclient.Client
	out    *testenv.SyncBuffer
	exited chan error
}

// startSidecar runs a sidecar for pod name in namespace ns holding lock "orders".
func startSidecar(t *testing.T, ns, name string, extraEnv ...string) *sidecarProc {
	t.Helper()
	return startSidecarAt(t, ns, name, filepath.Join(t.TempDir(), name+".sock"), extraEnv...)
}

// startSidecarAt is startSidecar serving socket: a sidecar started again on the same socket is a
// restart in the same pod (same emptyDir), one on another socket a process of another pod.
func startSidecarAt(t *testing.T, ns, name, socket string, extraEnv ...string) *sidecarProc {
	t.Helper()
	cl := storeReady(t)
	p := &sidecarProc{name: name, socket: socket, out: &testenv.SyncBuffer{}, exited: make(chan error, 1), client: sidecarclient.New(socket)}
	p.cmd = exec.Command(binary)
	p.cmd.Env = append(os.Environ(),
		"BATON_LOCK_IDS=orders", "BATON_CASSANDRA_HOSTS="+strings.Join(cl.Hosts(), ","),
		"BATON_CASSANDRA_KEYSPACE="+keyspace, "BATON_LEASE="+lease.String(), "BATON_SHUTDOWN_TIMEOUT=5s",
		"POD_NAMESPACE="+ns, "POD_NAME="+name, "POD_UID=uid-"+name, "BATON_SOCKET="+socket,
		"BATON_METRICS_ADDR=127.0.0.1:0", "BATON_TRAFFIC_POLICY=None")
	p.cmd.Env = append(p.cmd.Env, extraEnv...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.exited <- p.cmd.Wait() }()
	t.Cleanup(func() {
		p.cmd.Process.Signal(syscall.SIGCONT)
		p.cmd.Process.Kill()
		<-p.exited
		if t.Failed() {
			t.Logf("output of sidecar %s:\n%s", name, p.out.String())
		}
	})
	testenv.WaitFor(t, "sidecar "+name+" to serve its socket", 30*time.Second, func() bool {
		_, err := p.client.Locks(context.Background())
		return err == nil
	})
	return p
}

// storeReady starts Cassandra and creates the schema, once.
func storeReady(t *testing.T) *localcassandra.Cluster {
	t.Helper()
	cl := cassandra.Cluster(t)
	schemaOnce.Do(func() {
		s := cassandra.Session(t)
		if err := cassandrastore.EnsureSchema(context.Background(), s, keyspace, ""); err != nil {
			t.Fatal(err)
		}
	})
	return cl
}

func (p *sidecarProc) ready(t *testing.T) bool {
	ok, err := p.client.Ready(context.Background())
	return err == nil && ok
}

func (p *sidecarProc) rssKiB(t *testing.T) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return -1
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		var kib int
		if n, _ := fmt.Sscanf(sc.Text(), "VmRSS: %d kB", &kib); n == 1 {
			return kib
		}
	}
	return -1
}

// onlyHolder waits until exactly one of ps is ready and returns it.
func onlyHolder(t *testing.T, ps []*sidecarProc, within time.Duration) *sidecarProc {
	t.Helper()
	var holder *sidecarProc
	testenv.WaitFor(t, "exactly one ready sidecar", within, func() bool {
		holder = nil
		n := 0
		for _, p := range ps {
			if p.ready(t) {
				holder, n = p, n+1
			}
		}
		if n > 1 {
			t.Fatalf("%d sidecars report ready at once", n)
		}
		return n == 1
	})
	return holder
}

// events subscribes to a sidecar's event stream for the rest of the test.
func events(t *testing.T, p *sidecarProc) <-chan sidecarclient.Event {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ch, _ := p.client.Events(ctx)
	return ch
}

func nextEvent(t *testing.T, ch <-chan sidecarclient.Event, within time.Duration) sidecarclient.Event {
	t.Helper()
	select {
	case e, ok := <-ch:
		if !ok {
			t.Fatal("event stream ended")
		}
		return e
	case <-time.After(within):
		t.Fatalf("no event within %v", within)
	}
	return sidecarclient.Event{}
}

// watchOthers subscribes to the event streams of every sidecar in all but holder, and gives them
// a moment to connect.
func watchOthers(t *testing.T, all []*sidecarProc, holder *sidecarProc) map[*sidecarProc]<-chan sidecarclient.Event {
	streams := map[*sidecarProc]<-chan sidecarclient.Event{}
	for _, p := range all {
		if p != holder {
			streams[p] = events(t, p)
		}
	}
	time.Sleep(200 * time.Millisecond) // let the streams connect
	return streams
}

// firstAcquirer waits up to within for an acquired event on one of streams and returns its
// sidecar and the event.
func firstAcquirer(t *testing.T, streams map[*sidecarProc]<-chan sidecarclient.Event, within time.Duration) (*sidecarProc, sidecarclient.Event) {
	t.Helper()
	deadline := time.After(within)
	for {
		for p, ch := range streams {
			select {
			case e := <-ch:
				if e.Type == sidecarclient.EventAcquired {
					return p, e
				}
			case <-deadline:
				t.Fatalf("no sidecar acquired the lock within %v", within)
			default:
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestThreeSidecarsHandOff(t *testing.T) {
	ns := fmt.Sprintf("e2e-%d", time.Now().UnixNano())
	storeReady(t)
	start := time.Now()
	a := startSidecar(t, ns, "a")
	first := onlyHolder(t, []*sidecarProc{a}, 10*time.Second)
	t.Logf("first acquisition %v after the sidecar process started (Cassandra already up)", time.Since(start).Round(time.Millisecond))
	b, c := startSidecar(t, ns, "b"), startSidecar(t, ns, "c")
	all := []*sidecarProc{a, b, c}
	holder := onlyHolder(t, all, 10*time.Second)
	if holder != first {
		t.Fatalf("the holder changed from %s to %s without cause", first.name, holder.name)
	}
	st, err := holder.client.Lock(context.Background(), "orders")
	if err != nil || st.State != sidecarclient.StateHeld {
		t.Fatalf("holder status %+v %v", st, err)
	}
	t.Logf("holder %s token %d; RSS of a sidecar: %d KiB", holder.name, st.Token, holder.rssKiB(t))
	streams := watchOthers(t, all, holder)

	// SIGTERM: the holder releases, exits cleanly, and the head of the queue takes over.
	termAt := time.Now()
	holder.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-holder.exited:
		if err != nil {
			t.Fatalf("sidecar %s exited with %v after SIGTERM", holder.name, err)
		}
		holder.exited <- err
	case <-time.After(10 * time.Second):
		t.Fatal("sidecar did not exit within 10s of SIGTERM")
	}
	next, acquired := firstAcquirer(t, streams, 10*time.Second)
	t.Logf("handoff after SIGTERM: %s acquired token %d, %v after the signal", next.name, acquired.Token, time.Since(termAt).Round(time.Millisecond))
	if acquired.Token <= st.Token {
		t.Fatalf("token %d after %d", acquired.Token, st.Token)
	}
	rest := []*sidecarProc{}
	for _, p := range all {
		if p != holder {
			rest = append(rest, p)
		}
	}
	if got := onlyHolder(t, rest, 5*time.Second); got != next {
		t.Fatalf("ready sidecar %s, but %s announced the grant", got.name, next.name)
	}

	// SIGKILL: nothing is released; the last sidecar takes over within about one lease.
	var last *sidecarProc
	for _, p := range rest {
		if p != next {
			last = p
		}
	}
	// Its grant's queue entry is removed just after the grant; a kill before that leaves the
	// entry at the head, a path with a longer bound of its own (lock's
	// TestHoldersLeftoverEntryIsSkipped). This measures a dead holder's failover alone.
	testenv.WaitFor(t, "the new holder's queue entry to be gone", 10*time.Second, func() bool {
		q, err := cassandra.Session(t).Query(`SELECT owner FROM `+keyspace+`.lock_queue WHERE lock_id = ?`, ns+"/orders").Iter().SliceMap()
		if err != nil {
			return false
		}
		for _, e := range q {
			if strings.HasPrefix(fmt.Sprint(e["owner"]), ns+"/"+next.name+"/") {
				return false
			}
		}
		return true
	})
	killAt := time.Now()
	next.cmd.Process.Kill()
	e := nextEvent(t, streams[last], lease+5*time.Second)
	if e.Type != sidecarclient.EventAcquired || e.Token <= acquired.Token {
		t.Fatalf("after SIGKILL: %+v", e)
	}
	took := time.Since(killAt)
	t.Logf("failover after SIGKILL: %v (lease %v); RSS of the surviving sidecar: %d KiB", took.Round(time.Millisecond), lease, last.rssKiB(t))
	if took > lease+2*time.Second {
		t.Fatalf("failover took %v, more than lease + 2s", took)
	}
}

func TestPausedHolderReportsLoss(t *testing.T) {
	ns := fmt.Sprintf("e2e-%d", time.Now().UnixNano())
	a := startSidecar(t, ns, "a")
	onlyHolder(t, []*sidecarProc{a}, 10*time.Second)
	b := startSidecar(t, ns, "b")
	st, _ := a.client.Lock(context.Background(), "orders")
	aEvents := events(t, a)
	bEvents := events(t, b)
	time.Sleep(200 * time.Millisecond)

	a.cmd.Process.Signal(syscall.SIGSTOP)
	e := nextEvent(t, bEvents, 2*lease+5*time.Second)
	if e.Type != sidecarclient.EventAcquired || e.Token <= st.Token {
		t.Fatalf("b after a paused: %+v", e)
	}
	time.Sleep(lease) // a stays paused well past its lease
	resumed := time.Now()
	a.cmd.Process.Signal(syscall.SIGCONT)
	lost := nextEvent(t, aEvents, 10*time.Second)
	if lost.Type != sidecarclient.EventLost || lost.Token != st.Token {
		t.Fatalf("a after resuming: %+v, want lost for token %d", lost, st.Token)
	}
	// The report comes on resume, but it dates the end of a's hold at its deadline, during the
	// pause and before b's grant: the two reported holds do not overlap.
	if !lost.Time.Before(e.Time) || !lost.Time.Before(resumed) {
		t.Errorf("a's lost event is dated %v, b's acquired %v, the resume %v: want a's hold to end before b's grant",
			lost.Time.Format(time.StampMilli), e.Time.Format(time.StampMilli), resumed.Format(time.StampMilli))
	}
	t.Logf("paused holder reported on resume: %s (%s), dated %v before b's grant", lost.Type, lost.Reason, e.Time.Sub(lost.Time))
	for range 10 {
		cur, err := a.client.Lock(context.Background(), "orders")
		if err != nil {
			t.Fatal(err)
		}
		if cur.State == sidecarclient.StateHeld && cur.Token == st.Token {
			t.Fatalf("a claims its old token %d again", st.Token)
		}
		if a.ready(t) && cur.Token <= st.Token {
			t.Fatal("a reports ready without a new grant")
		}
		time.Sleep(100 * time.Millisecond)
	}
}
