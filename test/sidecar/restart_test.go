package main_test

import (
	"context"
	"fmt"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/testing/testenv"
	"github.com/baton-dev/baton/sidecarclient"
)

// TestCopiedIdentityQueuesLikeAStranger: zero-wait restart is proven locally, never by the pod
// identity alone (issue 22, item 7). A second sidecar process with the holder's namespace, pod
// name and UID but no shared volume (another socket directory) queues like a stranger while the
// holder lives; the holder's own restart (same socket directory, so same restart secret) takes
// the grant over at once, with a larger token, ahead of the copier queued before it.
func TestCopiedIdentityQueuesLikeAStranger(t *testing.T) {
	ns := fmt.Sprintf("e2e-copied-%d", time.Now().UnixNano())
	socket := filepath.Join(t.TempDir(), "baton.sock")
	holder := startSidecarAt(t, ns, "leader", socket)
	testenv.WaitFor(t, "the first sidecar to hold the lock", 10*time.Second, func() bool { return holder.ready(t) })
	first, err := holder.client.Lock(context.Background(), "orders")
	if err != nil {
		t.Fatal(err)
	}
	copier := startSidecar(t, ns, "leader") // same POD_NAME and POD_UID, another directory
	copierEvents := events(t, copier)
	deadline := time.After(2 * lease)
	for waiting := true; waiting; {
		select {
		case e := <-copierEvents:
			if e.Type == sidecarclient.EventAcquired {
				t.Fatalf("a process that copied the holder's identity was granted token %d while the holder (token %d) lives", e.Token, first.Token)
			}
		case <-deadline:
			waiting = false
		}
	}
	if !holder.ready(t) {
		t.Fatal("the holder lost the lock to a process with a copied identity")
	}
	st, err := copier.client.Lock(context.Background(), "orders")
	if err != nil || st.State != sidecarclient.StateWaiting {
		t.Fatalf("the copier's status: %+v, %v; want waiting", st, err)
	}

	// The holder crashes and the kubelet restarts it in the same pod: same socket directory.
	if err := holder.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	holder.exited <- <-holder.exited // gone; the cleanup reads it again
	killed := time.Now()
	restarted := startSidecarAt(t, ns, "leader", socket)
	testenv.WaitFor(t, "the restarted sidecar to take its grant over", 10*time.Second, func() bool { return restarted.ready(t) })
	again, err := restarted.client.Lock(context.Background(), "orders")
	if err != nil || again.Token <= first.Token {
		t.Fatalf("the restart holds token %d (%v), want more than %d", again.Token, err, first.Token)
	}
	t.Logf("the restart took the grant over %v after the kill, token %d → %d; the copier still waits",
		time.Since(killed).Round(time.Millisecond), first.Token, again.Token)
	select {
	case e := <-copierEvents:
		if e.Type == sidecarclient.EventAcquired {
			t.Fatalf("the copier was granted token %d after the holder's crash, ahead of the holder's restart", e.Token)
		}
	default:
	}
}

// TestTryModeRestartWaitsOutTheAppsGrant: in Try mode the grant belongs to the app process that
// asked for it, which may still act on it when the sidecar restarts, so the restarted sidecar has
// no zero-wait restart: it grants nobody the lock before the old grant's lease ran out.
func TestTryModeRestartWaitsOutTheAppsGrant(t *testing.T) {
	ns := fmt.Sprintf("e2e-tryrestart-%d", time.Now().UnixNano())
	socket := filepath.Join(t.TempDir(), "baton.sock")
	first := startSidecarAt(t, ns, "worker", socket, "BATON_MODE=Try")
	held, err := first.client.Acquire(context.Background(), "orders", 0)
	if err != nil || !held.Granted() {
		t.Fatalf("acquire of a free lock: %+v, %v", held, err)
	}
	if err := first.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	first.exited <- <-first.exited // gone; the cleanup reads it again
	killed := time.Now()
	restarted := startSidecarAt(t, ns, "worker", socket, "BATON_MODE=Try")
	if st, err := restarted.client.Acquire(context.Background(), "orders", 0); err == nil {
		t.Fatalf("the restarted Try-mode sidecar granted token %d %v after the kill, while the app's grant %d may still be in use",
			st.Token, time.Since(killed).Round(time.Millisecond), held.Token)
	}
	st, err := restarted.client.Acquire(context.Background(), "orders", 3*lease)
	if err != nil || !st.Granted() {
		t.Fatalf("acquire with a wait after the restart: %+v, %v", st, err)
	}
	if after := time.Since(killed); after < lease-lease/10 {
		t.Fatalf("granted %v after the kill; the app's grant was valid until at least %v after it", after, lease-lease/10)
	} else {
		t.Logf("granted token %d %v after the kill (lease %v)", st.Token, after.Round(time.Millisecond), lease)
	}
}
