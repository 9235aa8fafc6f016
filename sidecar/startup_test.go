package sidecar

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	batonv1 "github.com/baton-dev/baton/api/v1"
	"github.com/baton-dev/baton/internal/testing/testenv"
	"github.com/baton-dev/baton/lock/memstore"
	"github.com/baton-dev/baton/sidecarclient"
)

// closedPort returns a loopback address nothing listens on: a port that was just free.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// startRun runs the sidecar (Run) with o until the test ends, and returns what Run returned on
// a channel; a test that reads it must send it back, for the cleanup.
func startRun(t *testing.T, o Options) (stop context.CancelFunc, done chan error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan error, 1)
	go func() { ch <- Run(ctx, o, logr.Discard()) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			t.Error("Run did not return within 10 s of its context's end")
		}
	})
	return cancel, ch
}

// TestRunServesWhileStoreUnreachable: a sidecar whose Cassandra does not answer (a closed port,
// no Cassandra at all) opens its socket at once and answers every request 503 starting with
// what it waits for and the last failure; the probes say so too. A cancel then ends it cleanly.
func TestRunServesWhileStoreUnreachable(t *testing.T) {
	addr := closedPort(t)
	o := testOptions(t, "unreachable", batonv1.ModeBlocking, "orders")
	o.Cassandra.ContactPoints = []string{addr}
	o.TrafficPolicy = batonv1.TrafficNone
	o.SocketPath = filepath.Join(t.TempDir(), "baton.sock")
	o.MetricsAddr = "127.0.0.1:0"
	o.HintPort = 0
	stop, done := startRun(t, o)

	c := sidecarclient.New(o.SocketPath)
	var err error
	testenv.WaitFor(t, "the sidecar to answer on its socket while Cassandra is unreachable", 10*time.Second, func() bool {
		_, err = c.Locks(t.Context())
		var apiErr *sidecarclient.Error
		return errors.As(err, &apiErr)
	})
	want := "waiting for Cassandra at " + addr + ": "
	if !errors.Is(err, sidecarclient.ErrStarting) || !strings.Contains(err.Error(), want) ||
		!strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("GET /v1/locks: %v; want 503 starting saying %q and the last failure (connection refused)", err, want)
	}
	if ready, err := c.Ready(t.Context()); ready || err != nil {
		t.Errorf("Ready = %v, %v; want false", ready, err)
	}
	stop()
	select {
	case err := <-done:
		done <- err
		if err != nil {
			t.Errorf("Run after cancel while connecting: %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return within 10 s of cancel while connecting")
	}
}

// TestRunEndsOnRefusedLogin: a Cassandra that refuses the sidecar's login (a fake one that
// refuses every password), or asks for one the sidecar does not have, ends Run at once with an
// error that says so and what to fix, instead of being retried for ever like an unreachable node.
// The password never shows in the error.
func TestRunEndsOnRefusedLogin(t *testing.T) {
	for _, tc := range []struct {
		name, user, password, want string
	}{
		{"wrong password", "baton", "s3cret-pw", "refused the sidecar's user name or password"},
		{"no credentials", "", "", "requires a password login and the sidecar has no credentials"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cql := newRefusingCQL(t)
			o := testOptions(t, "login", batonv1.ModeBlocking, "orders")
			o.Cassandra.ContactPoints = []string{cql.addr()}
			o.Cassandra.Username, o.Cassandra.Password = tc.user, tc.password
			o.TrafficPolicy = batonv1.TrafficNone
			o.SocketPath = filepath.Join(t.TempDir(), "baton.sock")
			o.MetricsAddr = "127.0.0.1:0"
			o.HintPort = 0
			_, done := startRun(t, o)
			select {
			case err := <-done:
				done <- err
				if !errors.Is(err, ErrLoginRefused) || !strings.Contains(err.Error(), "Cassandra at "+cql.addr()+" "+tc.want) ||
					!strings.Contains(err.Error(), "credentialsSecretRef") {
					t.Fatalf("Run: %v; want ErrLoginRefused saying %q and what to fix", err, tc.want)
				}
				t.Logf("Run: %v", err)
				if tc.password != "" && strings.Contains(err.Error(), tc.password) {
					t.Errorf("the error shows the password: %v", err)
				}
				if n := cql.conns.Load(); n == 0 {
					t.Error("the fake Cassandra saw no connection")
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("Run still retrying 10 s after Cassandra refused the login (%d connections)", cql.conns.Load())
			}
		})
	}
}

// TestGateReportsStartup: before the holder runs, the gate writes what the sidecar waits for into
// the pod's baton.dev/lock-held condition (False, WaitingForStore) and follows each change of it;
// after the hand-over it writes the holder's state. On client-go's fake clientset, not a real API
// server (test/sidecar has the real one): the simple one, which builds in milliseconds where
// NewClientset's managed-fields converter takes seconds under the race detector.
func TestGateReportsStartup(t *testing.T) {
	client := fake.NewSimpleClientset(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "worker-0"}})
	o := testOptions(t, "worker-0", batonv1.ModeBlocking, "orders")
	o.Pod.Namespace = "shop"
	o.TrafficPolicy = batonv1.TrafficReadinessGate
	start := newStartup("connecting to Cassandra at 10.0.0.1:9042")
	ctx, cancel := context.WithCancel(context.Background())
	gate, stopGate := startGate(ctx, client, o, start, testr.New(t))
	defer cancel()
	defer stopGate()
	if gate == nil {
		t.Fatal("no gate with a Kubernetes client")
	}
	cond := func() corev1.PodCondition {
		pod, err := client.CoreV1().Pods("shop").Get(context.Background(), "worker-0", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range pod.Status.Conditions {
			if c.Type == batonv1.ConditionLockHeld {
				return c
			}
		}
		return corev1.PodCondition{}
	}
	wantCond := func(what string, status corev1.ConditionStatus, reason, message string) {
		t.Helper()
		testenv.WaitFor(t, what, 10*time.Second, func() bool {
			c := cond()
			return c.Status == status && c.Reason == reason && strings.Contains(c.Message, message)
		})
	}
	wantCond("the condition to say the sidecar connects", corev1.ConditionFalse, ReasonWaitingForStore, "connecting to Cassandra at 10.0.0.1:9042")
	start.waitFor(ReasonWaitingForStore, "waiting for Cassandra at 10.0.0.1:9042: connection refused (attempt 2; retrying)")
	wantCond("the condition to carry the last failure", corev1.ConditionFalse, ReasonWaitingForStore, "connection refused (attempt 2; retrying)")

	mem := memstore.New()
	h, err := NewHolder(o, mem.Client(1, memstore.Faults{}), logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = h.Shutdown(context.Background()) }()
	start.serve(h)
	wantCond("the condition to be the holder's once it runs", corev1.ConditionFalse, "WaitingForLock", "orders")
}

// TestStopStartingReportsTheFailure: a sidecar that gives up before its holder runs writes why
// into the pod's condition (False, StoreRefused) before it exits; one stopped by its context
// (SIGTERM) returns nil and writes nothing more. On client-go's fake clientset.
func TestStopStartingReportsTheFailure(t *testing.T) {
	client := fake.NewSimpleClientset(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "worker-0"}})
	o := testOptions(t, "worker-0", batonv1.ModeBlocking, "orders")
	o.Pod.Namespace = "shop"
	o.TrafficPolicy = batonv1.TrafficReadinessGate
	o.SocketPath = filepath.Join(t.TempDir(), "baton.sock")
	start := newStartup("connecting to Cassandra at 10.0.0.1:9042")
	srv, _, err := serveAPI(t.Context(), o, start, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	gate, stopGate := startGate(t.Context(), client, o, start, logr.Discard())
	refused := fmt.Errorf("sidecar: refusing to start: Cassandra at 10.0.0.1:9042 refused the sidecar's user name or password (%w)", ErrLoginRefused)
	if err := stopStarting(t.Context(), refused, gate, stopGate, srv, logr.Discard()); !errors.Is(err, ErrLoginRefused) {
		t.Fatalf("stopStarting = %v, want the failure back", err)
	}
	pod, err := client.CoreV1().Pods("shop").Get(t.Context(), "worker-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var cond corev1.PodCondition
	for _, c := range pod.Status.Conditions {
		if c.Type == batonv1.ConditionLockHeld {
			cond = c
		}
	}
	if cond.Status != corev1.ConditionFalse || cond.Reason != ReasonStoreRefused || cond.Message != refused.Error() {
		t.Errorf("condition %s %s %q, want False %s %q", cond.Status, cond.Reason, cond.Message, ReasonStoreRefused, refused)
	}
	if _, err := sidecarclient.New(o.SocketPath).Locks(t.Context()); err == nil || errors.Is(err, sidecarclient.ErrStarting) {
		t.Errorf("the API still answers after stopStarting: %v", err)
	}
}
