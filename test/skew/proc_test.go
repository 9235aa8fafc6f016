package skew_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/testing/testenv"
	"github.com/baton-dev/baton/sidecarclient"
)

// sidecarProc is one running sidecar process of one release.
type sidecarProc struct {
	name, release string
	cmd           *exec.Cmd
	client        *sidecarclient.Client
	metricsURL    string
	out           *testenv.SyncBuffer
	exited        chan error
}

func (p *sidecarProc) String() string { return fmt.Sprintf("%s (release %s)", p.name, p.release) }

// startSidecar runs binary as the sidecar of pod name in namespace ns, holding lock "orders" in
// Blocking mode, with hints on podIP:hintPort (a loopback address per pod, as pods have IPs of
// their own). It sets only the environment variables both releases read, as the webhook of each
// release would (release N also gets BATON_HINT_ALLOW_LOOPBACK, which N-1 does not know and
// ignores: N-1 sent hints to loopback addresses unasked).
func startSidecar(t *testing.T, binary, release, ns, name, podIP string, hintPort int) *sidecarProc {
	t.Helper()
	cl := storeReady(t)
	socket := filepath.Join(t.TempDir(), "baton.sock")
	mport := testenv.FreePort(t)
	p := &sidecarProc{name: name, release: release, out: &testenv.SyncBuffer{}, exited: make(chan error, 1),
		client: sidecarclient.New(socket), metricsURL: fmt.Sprintf("http://127.0.0.1:%d/metrics", mport)}
	p.cmd = exec.Command(binary)
	p.cmd.Env = append(os.Environ(),
		"BATON_LOCK_IDS="+lockName, "BATON_CASSANDRA_HOSTS="+strings.Join(cl.Hosts(), ","),
		"BATON_CASSANDRA_KEYSPACE="+keyspace, "BATON_LEASE="+lease.String(), "BATON_SHUTDOWN_TIMEOUT=5s",
		"POD_NAMESPACE="+ns, "POD_NAME="+name, "POD_UID=uid-"+name, "POD_IP="+podIP, "BATON_SOCKET="+socket,
		fmt.Sprintf("BATON_METRICS_ADDR=127.0.0.1:%d", mport), fmt.Sprintf("BATON_HINT_PORT=%d", hintPort),
		"BATON_HINT_ALLOW_LOOPBACK=true", "BATON_TRAFFIC_POLICY=None")
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.exited <- p.cmd.Wait() }()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.exited
		p.exited <- nil
		if t.Failed() {
			t.Logf("output of sidecar %s:\n%s", p, p.out.String())
		}
	})
	testenv.WaitFor(t, "sidecar "+p.String()+" to serve its socket", 30*time.Second, func() bool {
		_, err := p.client.Locks(context.Background())
		return err == nil
	})
	return p
}

// ready reports whether p's lock is held (its readiness endpoint says so).
func (p *sidecarProc) ready() bool {
	ok, err := p.client.Ready(context.Background())
	return err == nil && ok
}

// token returns the fencing token p holds, failing the test when it holds none.
func (p *sidecarProc) token(t *testing.T) int64 {
	t.Helper()
	st, err := p.client.Lock(context.Background(), lockName)
	if err != nil || !st.Granted() {
		t.Fatalf("%s: status %+v, %v; want the lock held", p, st, err)
	}
	return st.Token
}

// onlyHolder waits until exactly one of ps is ready and returns it; two at once fail the test.
func onlyHolder(t *testing.T, ps []*sidecarProc, within time.Duration) *sidecarProc {
	t.Helper()
	var holder *sidecarProc
	testenv.WaitFor(t, "exactly one ready sidecar", within, func() bool {
		holder = nil
		n := 0
		for _, p := range ps {
			if p.ready() {
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

// subscribe opens p's event stream for the rest of the test, returning once the sidecar took it.
func subscribe(t *testing.T, p *sidecarProc) <-chan sidecarclient.Event {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	events, _, err := p.client.Subscribe(ctx)
	if err != nil {
		t.Fatalf("subscribing to %s's events: %v", p, err)
	}
	return events
}

// nextAcquired returns the next acquired event of events, passing over events of other types,
// and fails the test when none comes within within.
func nextAcquired(t *testing.T, events <-chan sidecarclient.Event, within time.Duration) sidecarclient.Event {
	t.Helper()
	deadline := time.After(within)
	for {
		select {
		case e, ok := <-events:
			if !ok {
				t.Fatal("event stream ended")
			}
			if e.Type == sidecarclient.EventAcquired {
				return e
			}
			t.Logf("event %+v (waiting for acquired)", e)
		case <-deadline:
			t.Fatalf("no acquired event within %v", within)
		}
	}
}

// handOff sends SIGTERM to holder, checks that it exits cleanly (having released), and returns
// next's acquired event from events and how long after the signal it came. Between the two, at
// most one of them is ready.
func handOff(t *testing.T, holder, next *sidecarProc, events <-chan sidecarclient.Event) (sidecarclient.Event, time.Duration) {
	t.Helper()
	termAt := time.Now()
	if err := holder.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	e := nextAcquired(t, events, 10*time.Second)
	took := time.Since(termAt)
	select {
	case err := <-holder.exited:
		holder.exited <- err
		if err != nil {
			t.Fatalf("%s exited with %v after SIGTERM, want a clean exit", holder, err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not exit within 10s of SIGTERM", holder)
	}
	if got := onlyHolder(t, []*sidecarProc{next}, 5*time.Second); got != next {
		t.Fatalf("holder %s, want %s", got, next)
	}
	return e, took
}
