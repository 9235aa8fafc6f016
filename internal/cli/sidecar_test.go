package cli

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/utils/clock"

	"github.com/baton-dev/baton/internal/suspendclock"
	"github.com/baton-dev/baton/internal/testing/fakesidecar"
	"github.com/baton-dev/baton/internal/testing/testenv"
	"github.com/baton-dev/baton/sidecarclient"
)

var (
	heldOrders = sidecarclient.LockStatus{LockID: "orders", State: sidecarclient.StateHeld, Token: 7, LeaseRemainingMs: 12345}
	waitOrders = sidecarclient.LockStatus{LockID: "orders", State: sidecarclient.StateWaiting, QueuePosition: 2, Holder: "shop/orders-1"}
	idleReport = sidecarclient.LockStatus{LockID: "report", State: sidecarclient.StateIdle}
	lostBilled = sidecarclient.LockStatus{LockID: "billing", State: sidecarclient.StateLost, Token: 3, Reason: "lease expired"}
)

// notTryMode is the Acquire of a Blocking-mode lock.
func notTryMode(context.Context, string, time.Duration) (sidecarclient.LockStatus, error) {
	return sidecarclient.LockStatus{}, sidecarclient.ErrNotTryMode
}

func TestStatusTable(t *testing.T) {
	f := &fakesidecar.Service{T: t}
	f.StaticLocks(heldOrders, waitOrders, idleReport, lostBilled)
	sock := fakesidecar.Serve(t, f)
	inv := runCLI(t, &invocation{args: []string{"status"}, env: map[string]string{"BATON_SOCKET": sock}})
	if inv.code != 0 {
		t.Fatalf("exit %d, stderr: %s", inv.code, inv.stderr.String())
	}
	want := `LOCK     STATE    TOKEN  HOLDER         POSITION  LEASE LEFT
orders   held     7      -              -         12.3s
orders   waiting  -      shop/orders-1  2         -
report   idle     -      -              -         -
billing  lost     3      -              -         -
`
	if got := inv.stdout.String(); got != want {
		t.Errorf("table:\n%s\nwant:\n%s", got, want)
	}
}

func TestStatusJSON(t *testing.T) {
	f := &fakesidecar.Service{T: t}
	f.StaticLocks(heldOrders, idleReport)
	sock := fakesidecar.Serve(t, f)
	inv := runCLI(t, &invocation{args: []string{"status", "--json", "--socket", sock}})
	if inv.code != 0 {
		t.Fatalf("exit %d, stderr: %s", inv.code, inv.stderr.String())
	}
	var got struct {
		Locks []sidecarclient.LockStatus `json:"locks"`
	}
	if err := json.Unmarshal([]byte(inv.stdout.String()), &got); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, inv.stdout.String())
	}
	if diff := cmp.Diff([]sidecarclient.LockStatus{heldOrders, idleReport}, got.Locks); diff != "" {
		t.Errorf("locks (-want +got):\n%s", diff)
	}
}

func TestWaitReturnsOnAcquiredEvent(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		push []sidecarclient.Event
		want string
	}{
		{"one lock", []string{"--lock", "orders"},
			[]sidecarclient.Event{{Type: sidecarclient.EventAcquired, LockID: "orders", Token: 8}},
			"orders token 8\n"},
		{"every declared lock", nil,
			[]sidecarclient.Event{
				{Type: sidecarclient.EventAcquired, LockID: "orders", Token: 8},
				{Type: sidecarclient.EventAcquired, LockID: "other", Token: 3}, // not declared: ignored
				{Type: sidecarclient.EventAcquired, LockID: "report", Token: 2},
			},
			"orders token 8\nreport token 2\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakesidecar.Service{T: t, Events: true}
			f.StaticLocks(waitOrders, idleReport)
			sock := fakesidecar.Serve(t, f)
			inv := start(t, &invocation{args: append([]string{"wait", "--socket", sock, "--timeout", "1m"}, tc.args...)})
			f.WaitSubscribed(1)
			for i, ev := range tc.push {
				select {
				case <-inv.done:
					t.Fatalf("wait exited before event %d: %d, stderr: %s", i, inv.code, inv.stderr.String())
				default:
				}
				f.Push(ev)
			}
			if code := inv.wait(t, 10*time.Second); code != 0 {
				t.Fatalf("exit %d, stderr: %s", code, inv.stderr.String())
			}
			if got := inv.stdout.String(); got != tc.want {
				t.Errorf("stdout = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestWaitTimesOut(t *testing.T) {
	f := &fakesidecar.Service{T: t, Events: true}
	f.StaticLocks(waitOrders)
	sock := fakesidecar.Serve(t, f)
	start := time.Now()
	inv := runCLI(t, &invocation{args: []string{"wait", "--socket", sock, "--lock", "orders", "--timeout", "300ms"}})
	if inv.code != ExitFailure {
		t.Fatalf("exit %d, want 1; stderr: %s", inv.code, inv.stderr.String())
	}
	if el := time.Since(start); el < 300*time.Millisecond {
		t.Errorf("returned after %v, before the timeout", el)
	}
	want := `baton: timed out after 300ms waiting for orders (waiting, position 2, held by shop/orders-1)`
	if got := inv.stderr.String(); !strings.Contains(got, want) {
		t.Errorf("stderr = %q, want it to contain %q", got, want)
	}
	if inv.stdout.String() != "" {
		t.Errorf("stdout = %q, want nothing", inv.stdout.String())
	}
}

func TestWaitFallsBackToPolling(t *testing.T) {
	// An acquisition whose event was missed is still noticed by the slow re-read.
	f := &fakesidecar.Service{T: t, Events: true}
	var calls atomic.Int32
	f.OnLocks = func() []sidecarclient.LockStatus {
		if calls.Add(1) < 3 {
			return []sidecarclient.LockStatus{waitOrders}
		}
		return []sidecarclient.LockStatus{heldOrders}
	}
	sock := fakesidecar.Serve(t, f)
	inv := runCLI(t, &invocation{args: []string{"wait", "--socket", sock, "--timeout", "1m"}, poll: 20 * time.Millisecond})
	if inv.code != 0 || inv.stdout.String() != "orders token 7\n" {
		t.Fatalf("exit %d, stdout %q, stderr: %s", inv.code, inv.stdout.String(), inv.stderr.String())
	}
}

func TestRunPassesTokenAndExitCode(t *testing.T) {
	f := &fakesidecar.Service{T: t, Events: true, OnAcquire: notTryMode}
	f.StaticLocks(heldOrders)
	sock := fakesidecar.Serve(t, f)
	inv := runCLI(t, &invocation{
		args: []string{"run", "--socket", sock, "--lock", "orders", "--", "sh", "-c", `echo "$BATON_TOKEN $BATON_LOCK"; exit 3`},
		env:  map[string]string{},
	})
	if inv.code != 3 {
		t.Fatalf("exit %d, want the child's 3; stderr: %s", inv.code, inv.stderr.String())
	}
	if got := inv.stdout.String(); got != "7 orders\n" {
		t.Errorf("child printed %q, want %q", got, "7 orders\n")
	}
	if slices.Contains(f.Calls(), "Release orders") {
		t.Errorf("a Blocking-mode lock was released: calls %v", f.Calls())
	}
}

func TestRunWaitsForBlockingLock(t *testing.T) {
	// The only declared lock is used without --lock; the child starts once the acquired event
	// arrives, with its token.
	f := &fakesidecar.Service{T: t, Events: true, OnAcquire: notTryMode}
	f.StaticLocks(waitOrders)
	sock := fakesidecar.Serve(t, f)
	inv := start(t, &invocation{args: []string{"run", "--socket", sock, "--", "sh", "-c", `echo "$BATON_TOKEN"`}})
	f.WaitSubscribed(1)
	f.Push(sidecarclient.Event{Type: sidecarclient.EventAcquired, LockID: "orders", Token: 11})
	if code := inv.wait(t, 10*time.Second); code != 0 {
		t.Fatalf("exit %d, stderr: %s", code, inv.stderr.String())
	}
	if got := inv.stdout.String(); got != "11\n" {
		t.Errorf("child printed %q, want 11", got)
	}
}

func TestRunKillsChildWhenLockLost(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cmd     []string
		grace   string
		lose    func(f *fakesidecar.Service)
		wantErr []string
	}{
		{"lost event", []string{"sleep", "30"}, "10s",
			func(f *fakesidecar.Service) {
				f.Push(sidecarclient.Event{Type: sidecarclient.EventLost, LockID: "other", Token: 1})  // another lock: ignored
				f.Push(sidecarclient.Event{Type: sidecarclient.EventLost, LockID: "orders", Token: 6}) // an earlier grant: ignored
				f.Push(sidecarclient.Event{Type: sidecarclient.EventLost, LockID: "orders", Token: 7, Reason: "lease expired"})
			},
			[]string{`lost lock "orders" (token 7)`, "lease expired", "killed sleep's process group at once: SIGKILL at"}},
		{"stream ends", []string{"sleep", "30"}, "10s",
			func(f *fakesidecar.Service) { f.EndStream() },
			[]string{`lost lock "orders"`, "ended its event stream"}},
		{"child ignores SIGTERM", []string{"sh", "-c", `trap "" TERM; echo ready; while :; do sleep 0.05; done`}, "300ms",
			func(f *fakesidecar.Service) {
				f.Push(sidecarclient.Event{Type: sidecarclient.EventLost, LockID: "orders", Token: 7})
			},
			[]string{`lost lock "orders"`, "process group at once: SIGKILL at"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakesidecar.Service{T: t, Events: true, OnAcquire: notTryMode}
			f.StaticLocks(heldOrders)
			sock := fakesidecar.Serve(t, f)
			args := append([]string{"run", "--socket", sock, "--lock", "orders", "--grace", tc.grace, "--"}, tc.cmd...)
			inv := start(t, &invocation{args: args})
			f.WaitSubscribed(1)
			if tc.cmd[0] == "sh" {
				testenv.WaitFor(t, "the child to start", 10*time.Second, func() bool { return strings.Contains(inv.stdout.String(), "ready") })
			}
			begin := time.Now()
			tc.lose(f)
			if code := inv.wait(t, 10*time.Second); code != ExitTempFail {
				t.Fatalf("exit %d, want 75; stderr: %s", code, inv.stderr.String())
			}
			if el := time.Since(begin); el > 5*time.Second {
				t.Errorf("took %v to stop the child", el)
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(inv.stderr.String(), w) {
					t.Errorf("stderr %q does not contain %q", inv.stderr.String(), w)
				}
			}
		})
	}
}

func TestRunTryModeAcquiresAndReleases(t *testing.T) {
	f := &fakesidecar.Service{T: t, Events: true}
	f.StaticLocks(idleReport)
	var gotWait time.Duration
	f.OnAcquire = func(_ context.Context, id string, wait time.Duration) (sidecarclient.LockStatus, error) {
		gotWait = wait
		return sidecarclient.LockStatus{LockID: id, State: sidecarclient.StateHeld, Token: 9}, nil
	}
	var gotToken int64
	f.OnRelease = func(_ context.Context, id string, token int64) (sidecarclient.LockStatus, error) {
		gotToken = token
		return sidecarclient.LockStatus{LockID: id, State: sidecarclient.StateIdle}, nil
	}
	sock := fakesidecar.Serve(t, f)
	inv := runCLI(t, &invocation{args: []string{"run", "--socket", sock, "--lock", "report", "--wait", "2s", "--",
		"sh", "-c", `echo "$BATON_TOKEN $BATON_LOCK"`}})
	if inv.code != 0 {
		t.Fatalf("exit %d, stderr: %s", inv.code, inv.stderr.String())
	}
	if got := inv.stdout.String(); got != "9 report\n" {
		t.Errorf("child printed %q, want %q", got, "9 report\n")
	}
	if gotWait != 2*time.Second {
		t.Errorf("acquire wait = %v, want 2s", gotWait)
	}
	if gotToken != 9 {
		t.Errorf("released with token %d, want its own grant's 9", gotToken)
	}
	calls := f.Calls()
	ia, ir := slices.Index(calls, "Acquire report"), slices.Index(calls, "Release report")
	if ia < 0 || ir < ia {
		t.Errorf("calls = %v, want Acquire report then Release report", calls)
	}
}

// TestRunWaitsLongerThanOneAcquire runs baton run with a --wait beyond the longest wait the
// sidecar accepts in one acquire request (10m, sidecarapi.DefaultMaxWait), as a worker under
// baton run in an app image does while its pod waits for its turn: in Blocking mode it waits for
// the sidecar's grant, in Try mode it asks again while --wait lasts.
func TestRunWaitsLongerThanOneAcquire(t *testing.T) {
	t.Run("Blocking", func(t *testing.T) {
		f := &fakesidecar.Service{T: t, Events: true, OnAcquire: notTryMode}
		f.StaticLocks(heldOrders)
		inv := runCLI(t, &invocation{args: []string{"run", "--socket", fakesidecar.Serve(t, f), "--wait", "8760h", "--",
			"sh", "-c", `echo "$BATON_TOKEN"`}})
		if inv.code != 0 || inv.stdout.String() != "7\n" {
			t.Fatalf("exit %d, child printed %q; want 0 and 7; stderr: %s", inv.code, inv.stdout.String(), inv.stderr.String())
		}
	})
	t.Run("Try", func(t *testing.T) {
		f := &fakesidecar.Service{T: t, Events: true}
		f.StaticLocks(idleReport)
		var waits []time.Duration
		f.OnAcquire = func(_ context.Context, id string, wait time.Duration) (sidecarclient.LockStatus, error) {
			waits = append(waits, wait)
			if len(waits) == 1 { // as at the end of a wait the lock stayed taken
				return sidecarclient.LockStatus{LockID: id, State: sidecarclient.StateWaiting, Holder: "shop/report-2"}, sidecarclient.ErrLocked
			}
			return sidecarclient.LockStatus{LockID: id, State: sidecarclient.StateHeld, Token: 9}, nil
		}
		f.OnRelease = func(_ context.Context, id string, _ int64) (sidecarclient.LockStatus, error) {
			return sidecarclient.LockStatus{LockID: id, State: sidecarclient.StateIdle}, nil
		}
		inv := runCLI(t, &invocation{args: []string{"run", "--socket", fakesidecar.Serve(t, f), "--lock", "report", "--wait", "24h", "--",
			"sh", "-c", `echo "$BATON_TOKEN"`}})
		if inv.code != 0 || inv.stdout.String() != "9\n" {
			t.Fatalf("exit %d, child printed %q; want 0 and 9; stderr: %s", inv.code, inv.stdout.String(), inv.stderr.String())
		}
		if want := []time.Duration{10 * time.Minute, 10 * time.Minute}; !slices.Equal(waits, want) {
			t.Errorf("acquire waits %v, want %v", waits, want)
		}
	})
}

func TestRunTryModeLocked(t *testing.T) {
	f := &fakesidecar.Service{T: t, Events: true}
	f.OnAcquire = func(_ context.Context, id string, _ time.Duration) (sidecarclient.LockStatus, error) {
		return sidecarclient.LockStatus{LockID: id, State: sidecarclient.StateIdle, Holder: "shop/report-2"}, sidecarclient.ErrLocked
	}
	f.OnLocks = func() []sidecarclient.LockStatus { return []sidecarclient.LockStatus{idleReport} } // for the error message
	sock := fakesidecar.Serve(t, f)
	inv := runCLI(t, &invocation{args: []string{"run", "--socket", sock, "--lock", "report", "--wait", "0", "--",
		"sh", "-c", "echo should not run"}})
	if inv.code != ExitTempFail {
		t.Fatalf("exit %d, want 75; stderr: %s", inv.code, inv.stderr.String())
	}
	if !strings.Contains(inv.stderr.String(), `lock "report" held by shop/report-2`) {
		t.Errorf("stderr = %q", inv.stderr.String())
	}
	if inv.stdout.String() != "" {
		t.Errorf("the child ran: %q", inv.stdout.String())
	}
}

func TestRunForwardsSignals(t *testing.T) {
	f := &fakesidecar.Service{T: t, Events: true, OnAcquire: notTryMode}
	f.StaticLocks(heldOrders)
	sock := fakesidecar.Serve(t, f)
	sigs := make(chan os.Signal, 1)
	inv := start(t, &invocation{sigs: sigs, args: []string{"run", "--socket", sock, "--lock", "orders", "--",
		"sh", "-c", `trap 'echo got INT; exit 7' INT; echo ready; while :; do sleep 0.05; done`}})
	testenv.WaitFor(t, "the child to start", 10*time.Second, func() bool { return strings.Contains(inv.stdout.String(), "ready") })
	sigs <- syscall.SIGINT
	if code := inv.wait(t, 10*time.Second); code != 7 {
		t.Fatalf("exit %d, want the child's 7; stderr: %s", code, inv.stderr.String())
	}
	if !strings.Contains(inv.stdout.String(), "got INT") {
		t.Errorf("child output %q, want it to have got SIGINT", inv.stdout.String())
	}
}

func TestSignalBeforeChildStops(t *testing.T) {
	// A signal while wait is waiting stops it with 128+signal.
	f := &fakesidecar.Service{T: t, Events: true}
	f.StaticLocks(waitOrders)
	sock := fakesidecar.Serve(t, f)
	sigs := make(chan os.Signal, 1)
	inv := start(t, &invocation{sigs: sigs, args: []string{"wait", "--socket", sock}})
	f.WaitSubscribed(1)
	sigs <- syscall.SIGTERM
	if code := inv.wait(t, 10*time.Second); code != 128+int(syscall.SIGTERM) {
		t.Fatalf("exit %d, want 143; stderr: %s", code, inv.stderr.String())
	}
}

func TestRunChildKilledBySignal(t *testing.T) {
	f := &fakesidecar.Service{T: t, Events: true, OnAcquire: notTryMode}
	f.StaticLocks(heldOrders)
	sock := fakesidecar.Serve(t, f)
	inv := runCLI(t, &invocation{args: []string{"run", "--socket", sock, "--lock", "orders", "--", "sh", "-c", "kill -KILL $$"}})
	if inv.code != 128+9 {
		t.Fatalf("exit %d, want 137; stderr: %s", inv.code, inv.stderr.String())
	}
}

// TestYield: baton yield asks the sidecar to step down and prints the lock's state after: waiting
// in Blocking mode, held again in Try mode; 75 when not granted again within --wait, 1 when not
// held, 2 when the lock is not named and the pod declares several.
func TestYield(t *testing.T) {
	yielded := sidecarclient.LockStatus{LockID: "orders", State: sidecarclient.StateWaiting, Reason: "yielded: queueing again behind the waiters"}
	for _, tc := range []struct {
		name   string
		args   []string
		locks  []sidecarclient.LockStatus
		answer func(t *testing.T) func(context.Context, string, int64, time.Duration) (sidecarclient.LockStatus, error)
		code   int
		stdout string
		stderr string
	}{
		{name: "blocking", locks: []sidecarclient.LockStatus{heldOrders},
			answer: func(t *testing.T) func(context.Context, string, int64, time.Duration) (sidecarclient.LockStatus, error) {
				return yieldWants(t, "orders", 0, 0, yielded, nil)
			},
			stdout: "orders waiting (yielded: queueing again behind the waiters)\n"},
		{name: "try with a wait", args: []string{"--lock", "orders", "--wait", "30s"},
			answer: func(t *testing.T) func(context.Context, string, int64, time.Duration) (sidecarclient.LockStatus, error) {
				return yieldWants(t, "orders", 0, 30*time.Second, sidecarclient.LockStatus{LockID: "orders", State: sidecarclient.StateHeld, Token: 9}, nil)
			},
			stdout: "orders token 9\n"},
		{name: "not granted again", args: []string{"--lock", "orders"},
			answer: func(t *testing.T) func(context.Context, string, int64, time.Duration) (sidecarclient.LockStatus, error) {
				return yieldWants(t, "orders", 0, 0, sidecarclient.LockStatus{LockID: "orders", State: sidecarclient.StateIdle}, sidecarclient.ErrLocked)
			},
			code: ExitTempFail, stderr: `yielded lock "orders"; not granted again within --wait 0s`},
		{name: "not held", args: []string{"--lock", "orders"},
			answer: func(t *testing.T) func(context.Context, string, int64, time.Duration) (sidecarclient.LockStatus, error) {
				return yieldWants(t, "orders", 0, 0, sidecarclient.LockStatus{}, sidecarclient.ErrNotHeld)
			},
			code: ExitFailure, stderr: `lock "orders" is not held by this pod: nothing to yield`},
		{name: "with a token", args: []string{"--lock", "orders", "--token", "7"},
			answer: func(t *testing.T) func(context.Context, string, int64, time.Duration) (sidecarclient.LockStatus, error) {
				return yieldWants(t, "orders", 7, 0, yielded, nil)
			},
			stdout: "orders waiting (yielded: queueing again behind the waiters)\n"},
		{name: "another grant", args: []string{"--lock", "orders", "--token", "6"},
			answer: func(t *testing.T) func(context.Context, string, int64, time.Duration) (sidecarclient.LockStatus, error) {
				return yieldWants(t, "orders", 6, 0, heldOrders, sidecarclient.ErrTokenMismatch)
			},
			code: ExitFailure, stderr: `lock "orders" is not held with token 6 (that grant ended): nothing yielded`},
		{name: "negative token", args: []string{"--lock", "orders", "--token", "-1"},
			code: ExitUsage, stderr: "--token is -1"},
		{name: "which lock", locks: []sidecarclient.LockStatus{heldOrders, idleReport},
			code: ExitUsage, stderr: "--lock is required: the pod declares 2 locks (orders, report)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakesidecar.Service{T: t}
			if tc.locks != nil {
				f.StaticLocks(tc.locks...)
			}
			if tc.answer != nil {
				f.OnYield = tc.answer(t)
			}
			sock := fakesidecar.Serve(t, f)
			inv := runCLI(t, &invocation{args: append([]string{"yield", "--socket", sock}, tc.args...)})
			if inv.code != tc.code || inv.stdout.String() != tc.stdout || !strings.Contains(inv.stderr.String(), tc.stderr) {
				t.Errorf("exit %d, stdout %q, stderr %q; want %d, %q, stderr containing %q",
					inv.code, inv.stdout.String(), inv.stderr.String(), tc.code, tc.stdout, tc.stderr)
			}
		})
	}
}

func yieldWants(t *testing.T, wantID string, wantToken int64, wantWait time.Duration, st sidecarclient.LockStatus, err error) func(context.Context, string, int64, time.Duration) (sidecarclient.LockStatus, error) {
	return func(_ context.Context, id string, token int64, wait time.Duration) (sidecarclient.LockStatus, error) {
		if id != wantID || token != wantToken || wait != wantWait {
			t.Errorf("Yield(%q, %d, %v), want Yield(%q, %d, %v)", id, token, wait, wantID, wantToken, wantWait)
		}
		return st, err
	}
}

// TestRunKillsWhatTheChildLeftBehind: CMD runs in a process group of its own; what it leaves
// running there when it exits is killed before baton gives the lock up, and baton says so.
func TestRunKillsWhatTheChildLeftBehind(t *testing.T) {
	f := &fakesidecar.Service{T: t, Events: true, OnAcquire: notTryMode}
	f.StaticLocks(heldOrders)
	sock := fakesidecar.Serve(t, f)
	inv := runCLI(t, &invocation{args: []string{"run", "--socket", sock, "--lock", "orders", "--",
		"sh", "-c", `sleep 300 >/dev/null 2>&1 & echo $!`}})
	if inv.code != 0 {
		t.Fatalf("exit %d, stderr: %s", inv.code, inv.stderr.String())
	}
	pid, err := strconv.Atoi(strings.TrimSpace(inv.stdout.String()))
	if err != nil {
		t.Fatalf("child printed %q", inv.stdout.String())
	}
	testenv.WaitFor(t, "the left-behind sleep to be gone", 10*time.Second, func() bool { return !running(pid) })
	if !strings.Contains(inv.stderr.String(), "left processes in its group; killed them before giving the lock back") {
		t.Errorf("stderr = %q, want it to say what was killed", inv.stderr.String())
	}
}

// TestRunStopsChildByTheSidecarsDeadline: through a sidecar whose renewals stopped (the deadline it
// reports stays put, as when it is paused or cut off from Cassandra), baton run kills CMD's group
// by that deadline although CMD ignores SIGTERM and --grace is long: nothing CMD runs may outlast
// the lease. A sidecar whose deadline keeps moving (renewals coming) leaves CMD alone.
func TestRunStopsChildByTheSidecarsDeadline(t *testing.T) {
	child := []string{"sh", "-c", `trap "" TERM; echo ready; while :; do sleep 0.05; done`}
	t.Run("renewals stopped", func(t *testing.T) {
		f := &fakesidecar.Service{T: t, Events: true, OnAcquire: notTryMode}
		deadline := time.Now().Add(2 * time.Second)
		f.OnLocks = func() []sidecarclient.LockStatus { return []sidecarclient.LockStatus{heldUntil(deadline)} }
		f.OnLock = func(string) (sidecarclient.LockStatus, bool) { return heldUntil(deadline), true }
		sock := fakesidecar.Serve(t, f)
		inv := start(t, &invocation{args: append([]string{"run", "--socket", sock, "--lock", "orders", "--grace", "1m", "--"}, child...)})
		if code := inv.wait(t, 10*time.Second); code != ExitTempFail {
			t.Fatalf("exit %d, want 75; stderr: %s", code, inv.stderr.String())
		}
		if late := time.Since(deadline); late > 500*time.Millisecond {
			t.Errorf("baton run exited %v after the sidecar's deadline", late)
		}
		for _, w := range []string{"reported no renewal", "process group and SIGKILL at"} {
			if !strings.Contains(inv.stderr.String(), w) {
				t.Errorf("stderr %q does not contain %q", inv.stderr.String(), w)
			}
		}
	})
	t.Run("renewals coming", func(t *testing.T) {
		f := &fakesidecar.Service{T: t, Events: true, OnAcquire: notTryMode}
		renewed := func() sidecarclient.LockStatus { return heldUntil(time.Now().Add(2 * time.Second)) }
		f.OnLocks = func() []sidecarclient.LockStatus { return []sidecarclient.LockStatus{renewed()} }
		f.OnLock = func(string) (sidecarclient.LockStatus, bool) { return renewed(), true }
		sock := fakesidecar.Serve(t, f)
		inv := start(t, &invocation{args: []string{"run", "--socket", sock, "--lock", "orders", "--", "sh", "-c", "sleep 4"}})
		if code := inv.wait(t, 10*time.Second); code != 0 {
			t.Fatalf("exit %d, want 0 (CMD ran its 4 s past the first reported deadline); stderr: %s", code, inv.stderr.String())
		}
	})
}

// heldUntil is orders held with token 7 under a 3 s lease whose self-fence deadline is deadline.
func heldUntil(deadline time.Time) sidecarclient.LockStatus {
	return sidecarclient.LockStatus{LockID: "orders", State: sidecarclient.StateHeld, Token: 7,
		LeaseMs: 3000, LeaseRemainingMs: max(1, time.Until(deadline).Milliseconds())}
}

// TestRunRefusesAnAnswerThatIsNotAGrant: baton run runs CMD only on a Try-mode answer that hands
// it the lock: state held and a fencing token. Any other answer, even a 200 (an older sidecar
// answered another process's acquisition in progress with its waiting state, and a lease past its
// deadline with lost), and the 409s for another process of the pod acquiring or holding the lock,
// are refused: CMD does not run, nothing is released, exit 75 (issue 22, item 1).
func TestRunRefusesAnAnswerThatIsNotAGrant(t *testing.T) {
	held := sidecarclient.LockStatus{LockID: "report", State: sidecarclient.StateHeld, Token: 9, Holder: "shop/report-1"}
	for _, tc := range []struct {
		name string
		st   sidecarclient.LockStatus
		err  error
		want string
	}{
		{"200 waiting", sidecarclient.LockStatus{LockID: "report", State: sidecarclient.StateWaiting, QueuePosition: 1, Holder: "shop/report-2"}, nil,
			`answered state "waiting" with token 0`},
		{"200 lost", sidecarclient.LockStatus{LockID: "report", State: sidecarclient.StateLost, Token: 9, Reason: "lease expired: its self-fence deadline passed"}, nil,
			`answered state "lost" with token 9`},
		{"200 held without a token", sidecarclient.LockStatus{LockID: "report", State: sidecarclient.StateHeld}, nil,
			`answered state "held" with token 0`},
		{"409 acquiring", held, sidecarclient.ErrAcquiring, "another acquisition of it is in progress in this pod"},
		{"409 held by the pod", held, sidecarclient.ErrHeldByPod, "this pod holds it for another process"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakesidecar.Service{T: t, Events: true}
			var sock string
			if tc.err != nil {
				f.OnAcquire = func(context.Context, string, time.Duration) (sidecarclient.LockStatus, error) { return tc.st, tc.err }
				sock = fakesidecar.Serve(t, f)
			} else {
				// The handler answers 200 only with a grant: answer as older sidecars did.
				sock = fakesidecar.ServeWrapped(t, f, func(h http.Handler) http.Handler {
					return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
						if r.Method != http.MethodPost || r.URL.Path != "/v1/locks/report/acquire" {
							h.ServeHTTP(w, r)
							return
						}
						w.Header().Set("Content-Type", "application/json")
						_ = json.NewEncoder(w).Encode(tc.st)
					})
				})
			}
			inv := runCLI(t, &invocation{args: []string{"run", "--socket", sock, "--lock", "report", "--",
				"sh", "-c", "echo should not run"}})
			if inv.code != ExitTempFail || inv.stdout.String() != "" {
				t.Errorf("answer %+v, %v: exit %d, child printed %q; want 75 and no child; stderr: %s", tc.st, tc.err, inv.code, inv.stdout.String(), inv.stderr.String())
			}
			for _, want := range []string{`lock "report" not granted`, tc.want} {
				if !strings.Contains(inv.stderr.String(), want) {
					t.Errorf("stderr = %q, want it to contain %q", inv.stderr.String(), want)
				}
			}
			if slices.Contains(f.Calls(), "Release report") {
				t.Errorf("a lock it was not granted was released: calls %v", f.Calls())
			}
		})
	}
}

// TestRunReleasesOnlyItsGrant: at the end, baton run releases its own grant by its token; when the
// sidecar answers that the pod holds another grant (this one ended and another process was
// granted the lock since), that grant is left alone and baton says nothing of it.
func TestRunReleasesOnlyItsGrant(t *testing.T) {
	f := &fakesidecar.Service{T: t, Events: true}
	f.OnAcquire = func(_ context.Context, id string, _ time.Duration) (sidecarclient.LockStatus, error) {
		return sidecarclient.LockStatus{LockID: id, State: sidecarclient.StateHeld, Token: 9}, nil
	}
	f.OnRelease = func(_ context.Context, id string, token int64) (sidecarclient.LockStatus, error) {
		if token != 9 {
			t.Errorf("released with token %d, want 9", token)
		}
		return sidecarclient.LockStatus{LockID: id, State: sidecarclient.StateHeld, Token: 10}, sidecarclient.ErrTokenMismatch
	}
	sock := fakesidecar.Serve(t, f)
	inv := runCLI(t, &invocation{args: []string{"run", "--socket", sock, "--lock", "report", "--", "true"}})
	if inv.code != 0 || inv.stderr.String() != "" {
		t.Errorf("exit %d, stderr %q; want 0 and nothing said", inv.code, inv.stderr.String())
	}
}

// suspension is a machine's total suspended time as a test sets it, for suspendclock.Counting.
type suspension struct{ total atomic.Int64 }

func (s *suspension) read() time.Duration     { return time.Duration(s.total.Load()) }
func (s *suspension) suspend(d time.Duration) { s.total.Add(int64(d)) }

// heldOn is orders held with token 7 under a 30 s lease whose self-fence deadline is deadline, a
// reading of clk: what a sidecar on the same machine reports.
func heldOn(clk clock.PassiveClock, deadline time.Time) sidecarclient.LockStatus {
	return sidecarclient.LockStatus{LockID: "orders", State: sidecarclient.StateHeld, Token: 7,
		LeaseMs: 30000, LeaseRemainingMs: max(1, deadline.Sub(clk.Now()).Milliseconds())}
}

// TestRunThroughASidecarCountsSuspendedTime: the deadline baton run keeps for CMD through a
// sidecar counts the time the machine was suspended, as the lease's clock does (issue 22, item
// 3). The machine is suspended for an hour while CMD runs under a 30 s lease, and the sidecar
// does not answer after the resume (its pod is frozen): CMD's group is killed at once on resume,
// not 30 s of awake time later.
func TestRunThroughASidecarCountsSuspendedTime(t *testing.T) {
	var s suspension
	clk := suspendclock.Counting(s.read)
	deadline := clk.Now().Add(30 * time.Second)
	frozen := make(chan struct{})
	var resumed atomic.Bool
	f := &fakesidecar.Service{T: t, Events: true, OnAcquire: notTryMode}
	f.OnLocks = func() []sidecarclient.LockStatus { return []sidecarclient.LockStatus{heldOn(clk, deadline)} }
	f.OnLock = func(string) (sidecarclient.LockStatus, bool) {
		if resumed.Load() {
			<-frozen
		}
		return heldOn(clk, deadline), true
	}
	sock := fakesidecar.Serve(t, f)
	t.Cleanup(func() { close(frozen) }) // before the server closes
	inv := start(t, &invocation{clock: clk, args: []string{"run", "--socket", sock, "--lock", "orders", "--grace", "1m", "--",
		"sh", "-c", `trap "" TERM; echo ready; while :; do sleep 0.05; done`}})
	testenv.WaitFor(t, "the child to start", 10*time.Second, func() bool { return strings.Contains(inv.stdout.String(), "ready") })
	resumed.Store(true)
	s.suspend(time.Hour)
	at := time.Now()
	if code := inv.wait(t, 10*time.Second); code != ExitTempFail {
		t.Fatalf("exit %d, want 75; stderr: %s", code, inv.stderr.String())
	}
	took := time.Since(at)
	t.Logf("CMD's group killed %v after the resume", took.Round(time.Millisecond))
	if took > 2*time.Second {
		t.Errorf("CMD was stopped %v after the resume; the deadline passed during the suspension", took)
	}
	for _, w := range []string{"deadline", "SIGKILL at"} {
		if !strings.Contains(inv.stderr.String(), w) {
			t.Errorf("stderr %q does not contain %q", inv.stderr.String(), w)
		}
	}
}

// TestRunKillsAtOnceOnALoss: once the sidecar reports the lock lost, CMD's group is killed at
// once, as in direct mode, not after --grace or at the deadline the sidecar reported before: the
// lock may be another owner's already (issue 22, item 3).
func TestRunKillsAtOnceOnALoss(t *testing.T) {
	clk := suspendclock.New()
	deadline := clk.Now().Add(30 * time.Second)
	f := &fakesidecar.Service{T: t, Events: true, OnAcquire: notTryMode}
	f.OnLocks = func() []sidecarclient.LockStatus { return []sidecarclient.LockStatus{heldOn(clk, deadline)} }
	f.OnLock = func(string) (sidecarclient.LockStatus, bool) { return heldOn(clk, deadline), true }
	sock := fakesidecar.Serve(t, f)
	inv := start(t, &invocation{args: []string{"run", "--socket", sock, "--lock", "orders", "--grace", "1m", "--",
		"sh", "-c", `trap "" TERM; echo ready; while :; do sleep 0.05; done`}})
	testenv.WaitFor(t, "the child to start", 10*time.Second, func() bool { return strings.Contains(inv.stdout.String(), "ready") })
	f.Push(sidecarclient.Event{Type: sidecarclient.EventLost, LockID: "orders", Token: 7, Reason: "grant revoked"})
	at := time.Now()
	if code := inv.wait(t, 10*time.Second); code != ExitTempFail {
		t.Fatalf("exit %d, want 75; stderr: %s", code, inv.stderr.String())
	}
	took := time.Since(at)
	t.Logf("CMD's group killed %v after the lost event", took.Round(time.Millisecond))
	if took > 2*time.Second {
		t.Errorf("CMD was stopped %v after the loss; --grace is 1m, the reported deadline 30s away", took)
	}
	for _, w := range []string{`lost lock "orders" (token 7)`, "grant revoked", "SIGKILL"} {
		if !strings.Contains(inv.stderr.String(), w) {
			t.Errorf("stderr %q does not contain %q", inv.stderr.String(), w)
		}
	}
}
