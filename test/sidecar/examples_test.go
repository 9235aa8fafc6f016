package main_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/testing/fakesidecar"
	"github.com/baton-dev/baton/internal/testing/fencedstore"
	"github.com/baton-dev/baton/internal/testing/testenv"
	"github.com/baton-dev/baton/sidecarclient"
)

// exampleResult is the JSON line each program in examples/ prints.
type exampleResult struct {
	Lock          string `json:"lock"`
	Token         int64  `json:"token"`
	Written       bool   `json:"written"`
	StaleAccepted bool   `json:"staleAccepted"`
}

// TestExamplesFenceTheirWrites runs the programs in examples/ (Python writing to SQLite, Node and
// Go writing to an HTTP fenced resource) one after another against a real Try-mode sidecar on a
// real Cassandra. Each follows the event stream, acquires, writes with its token, sees a write with
// an older token rejected by the resource, and releases; tokens grow from one program to the next
// (issue 13, item 6).
func TestExamplesFenceTheirWrites(t *testing.T) {
	python, node := lookTool(t, "python3"), lookTool(t, "node")
	dir := t.TempDir()
	goExample := filepath.Join(dir, "go-example")
	if out, err := exec.Command("go", "build", "-o", goExample, "../../examples/go").CombinedOutput(); err != nil {
		t.Fatalf("go build ./examples/go: %v\n%s", err, out)
	}
	store, err := fencedstore.New()
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(store)
	defer srv.Close()
	db := filepath.Join(dir, "fenced.db")

	sc := startSidecar(t, fmt.Sprintf("examples-%d", time.Now().UnixNano()), "app", "BATON_MODE=Try")
	var last int64
	for _, ex := range []struct {
		name     string
		cmd      []string
		resource string // the fenced HTTP resource it writes to; "" for SQLite
	}{
		{"python", []string{python, "../../examples/python/fenced_sqlite.py"}, ""},
		{"node", []string{node, "../../examples/node/fenced_http.js"}, "node"},
		{"go", []string{goExample}, "go"},
	} {
		cmd := exec.Command(ex.cmd[0], ex.cmd[1:]...)
		cmd.Env = append(os.Environ(), "BATON_SOCKET="+sc.socket, "BATON_LOCKS=orders", "EXAMPLE_WAIT=10s", "EXAMPLE_DB="+db)
		if ex.resource != "" {
			cmd.Env = append(cmd.Env, "EXAMPLE_RESOURCE_URL="+srv.URL+"/v1/resources/"+ex.resource+"/writes")
		}
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s example: %v\n%s", ex.name, err, stderr.String())
		}
		var res exampleResult
		if err := json.Unmarshal(out, &res); err != nil {
			t.Fatalf("%s example printed %q: %v", ex.name, out, err)
		}
		t.Logf("%s example: %+v", ex.name, res)
		if res.Lock != "orders" || !res.Written || res.StaleAccepted || res.Token <= last {
			t.Errorf("%s example: %+v; want orders written with a token above %d and the stale write rejected", ex.name, res, last)
		}
		last = res.Token
		if st, err := sc.client.Lock(context.Background(), "orders"); err != nil || st.State == sidecarclient.StateHeld {
			t.Errorf("after the %s example: %+v, %v; want the lock released", ex.name, st, err)
		}
		if ex.resource == "" {
			// What the database holds, read with Python's own sqlite3.
			got, err := exec.Command(python, "-c", "import sqlite3,sys; print(*sqlite3.connect(sys.argv[1]).execute('SELECT fence, value FROM resource').fetchone(), sep='|')", db).Output()
			if want := fmt.Sprintf("%d|written by python with token %d", res.Token, res.Token); err != nil || strings.TrimSpace(string(got)) != want {
				t.Errorf("SQLite after the python example: %q, %v; want %q", got, err, want)
			}
			continue
		}
		if r := store.Resource(ex.resource); r.Highest != res.Token || r.Accepted != 1 || r.Rejected != 1 {
			t.Errorf("resource %s after the %s example: highest %d, %d accepted, %d rejected; want %d, 1, 1", ex.resource, ex.name, r.Highest, r.Accepted, r.Rejected, res.Token)
		}
	}
}

// lookTool finds a program the examples need; in CI a missing one fails the test.
func lookTool(t *testing.T, name string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		if testenv.InCI() {
			t.Fatalf("%s is needed to run its example: %v", name, err)
		}
		t.Skipf("%s not found (%v): install it to run its example", name, err)
	}
	return path
}

// TestBlockingExampleExitsOnLost runs examples/go-blocking, the Blocking-mode worker that exits
// when its pod stops holding the lock, as a process against the fake sidecar
// (internal/testing/fakesidecar: the sidecar's real API handler and server on a unix socket,
// answering with lock states and events the test sets; no Cassandra). It waits while the lock is
// not held, works with the token of the grant once it is, and exits 75 at once on each sign of the
// loss: a lost event, a state read that no longer shows its grant, the end of the event stream
// (issue 25, item 5). SIGTERM stops it with 0.
func TestBlockingExampleExitsOnLost(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "go-blocking")
	if out, err := exec.Command("go", "build", "-o", bin, "../../examples/go-blocking").CombinedOutput(); err != nil {
		t.Fatalf("go build ./examples/go-blocking: %v\n%s", err, out)
	}
	const bound = time.Second // from the sign of the loss to the process's exit
	status := func(state sidecarclient.State, token int64) sidecarclient.LockStatus {
		return sidecarclient.LockStatus{LockID: "orders", State: state, Token: token}
	}

	t.Run("lost event", func(t *testing.T) {
		f := &fakesidecar.Service{T: t, Events: true}
		f.SetLocks(status(sidecarclient.StateWaiting, 0))
		w := startBlockingExample(t, bin, fakesidecar.Serve(t, f), "EXAMPLE_CHECK=1m")
		f.WaitSubscribed(1)
		testenv.WaitFor(t, "the worker to say it waits", 10*time.Second, func() bool { return strings.Contains(w.stderr.String(), "waiting for lock orders") })
		f.SetLocks(status(sidecarclient.StateHeld, 8))
		f.Push(sidecarclient.Event{Type: sidecarclient.EventAcquired, LockID: "orders", Token: 8})
		w.waitWorking(t, 8)
		// The state still says held: only the event can make it stop. Events of another lock and of
		// an earlier grant come first and must not.
		f.Push(sidecarclient.Event{Type: sidecarclient.EventLost, LockID: "billing", Token: 8})
		f.Push(sidecarclient.Event{Type: sidecarclient.EventLost, LockID: "orders", Token: 6})
		f.Push(sidecarclient.Event{Type: sidecarclient.EventLost, LockID: "orders", Token: 8, Reason: "lease expired"})
		w.wantExit(t, bound, 75, "event lost of lock orders, token 8")
	})

	t.Run("state read", func(t *testing.T) {
		f := &fakesidecar.Service{T: t, Events: true}
		f.SetLocks(status(sidecarclient.StateHeld, 9)) // held at start, as the startup probe lets the app start
		const check = 200 * time.Millisecond
		w := startBlockingExample(t, bin, fakesidecar.Serve(t, f), "EXAMPLE_CHECK="+check.String())
		w.waitWorking(t, 9)
		f.SetLocks(status(sidecarclient.StateWaiting, 0)) // no event: a sidecar that missed telling it
		w.wantExit(t, check+bound, 75, "not held with token 9")
	})

	t.Run("stream end", func(t *testing.T) {
		f := &fakesidecar.Service{T: t, Events: true}
		f.SetLocks(status(sidecarclient.StateHeld, 10))
		w := startBlockingExample(t, bin, fakesidecar.Serve(t, f), "EXAMPLE_CHECK=1m")
		w.waitWorking(t, 10)
		f.WaitSubscribed(1)
		f.EndStream()
		w.wantExit(t, bound, 75, "ended its event stream")
	})

	t.Run("SIGTERM", func(t *testing.T) {
		f := &fakesidecar.Service{T: t, Events: true}
		f.SetLocks(status(sidecarclient.StateHeld, 11))
		w := startBlockingExample(t, bin, fakesidecar.Serve(t, f), "EXAMPLE_CHECK=1m")
		w.waitWorking(t, 11)
		if err := w.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		w.wantExit(t, bound, 0, "")
	})
}

// blockingExample is a running examples/go-blocking process.
type blockingExample struct {
	cmd            *exec.Cmd
	stdout, stderr *testenv.SyncBuffer
	exited         chan error
}

// startBlockingExample starts bin on socket with the lock orders; the process is killed when the
// test ends.
func startBlockingExample(t *testing.T, bin, socket string, env ...string) *blockingExample {
	t.Helper()
	w := &blockingExample{cmd: exec.Command(bin), stdout: &testenv.SyncBuffer{}, stderr: &testenv.SyncBuffer{}, exited: make(chan error, 1)}
	w.cmd.Env = append(append(os.Environ(), "BATON_SOCKET="+socket, "BATON_LOCKS=orders", "EXAMPLE_WORK=50ms"), env...)
	w.cmd.Stdout, w.cmd.Stderr = w.stdout, w.stderr
	if err := w.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { w.exited <- w.cmd.Wait() }()
	t.Cleanup(func() {
		_ = w.cmd.Process.Kill()
		<-w.exited
		if t.Failed() {
			t.Logf("worker stdout:\n%s\nworker stderr:\n%s", w.stdout.String(), w.stderr.String())
		}
	})
	return w
}

// waitWorking waits for the worker's first unit of work and checks it used token.
func (w *blockingExample) waitWorking(t *testing.T, token int64) {
	t.Helper()
	testenv.WaitFor(t, fmt.Sprintf("the worker to work with token %d", token), 10*time.Second, func() bool { return w.stdout.String() != "" })
	first, _, _ := strings.Cut(w.stdout.String(), "\n")
	var unit struct {
		Lock  string `json:"lock"`
		Token int64  `json:"token"`
		Unit  int    `json:"unit"`
	}
	if err := json.Unmarshal([]byte(first), &unit); err != nil || unit.Lock != "orders" || unit.Token != token || unit.Unit != 1 {
		t.Fatalf("the worker's first unit of work: %q (%v); want lock orders, token %d, unit 1", first, err, token)
	}
}

// wantExit checks that the worker exits with code within bound, saying what (when not "") on stderr.
func (w *blockingExample) wantExit(t *testing.T, bound time.Duration, code int, what string) {
	t.Helper()
	start := time.Now()
	select {
	case err := <-w.exited:
		w.exited <- err // for the cleanup
		got := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			got = ee.ExitCode()
		} else if err != nil {
			t.Fatalf("worker: %v", err)
		}
		t.Logf("worker exited %d after %v: %s", got, time.Since(start).Round(time.Millisecond), strings.TrimSpace(w.stderr.String()))
		if got != code || !strings.Contains(w.stderr.String(), what) {
			t.Fatalf("worker exited %d saying %q; want %d and a message containing %q", got, w.stderr.String(), code, what)
		}
	case <-time.After(bound):
		t.Fatalf("worker still running %v after the loss was signalled", bound)
	}
}
