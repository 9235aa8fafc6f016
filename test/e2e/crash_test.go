package e2e

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	batonv1 "github.com/baton-dev/baton/api/v1"
	"github.com/baton-dev/baton/internal/inject"
	"github.com/baton-dev/baton/internal/testing/images/demoapp"
	"github.com/baton-dev/baton/internal/testing/testenv"
	"github.com/baton-dev/baton/sidecarclient"
)

// TestKilledSidecarIsRestarted: the holder's sidecar container is killed (SIGKILL through
// containerd, as a crash). The app's event stream from the sidecar ends at once (an app must take
// that as every lock lost), the kubelet restarts the native sidecar in place, and the restarted
// sidecar (same pod, so the zero-wait restart rule applies) takes the lock back with a larger
// token, which the Service's answers show. It logs how long the Service gave no held answer.
func TestKilledSidecarIsRestarted(t *testing.T) {
	t.Parallel() // mostly waits (on the kubelet, a schedule, a second control plane): runs beside the others of its kind
	c := batonCluster(t)
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	ns := testenv.Namespace(t, c.client, "crash-")
	svcIP := deployDemo(t, ctx, c, ns, 2, batonv1.ModeBlocking, batonv1.TrafficReadinessGate)
	holder, token := waitForOneReady(t, ctx, c, ns, 2)

	// The app's view: the holder's socket, reached from the host through the kubelet's emptyDir.
	socket := filepath.Join(c.node.EmptyDir(string(holder.UID), inject.SocketVolume), filepath.Base(sidecarclient.SocketPath))
	app := sidecarClient(t, socket)
	// Subscribe, not Events: the stream must be open before the kill for its end to show the kill.
	events, streamErr, err := app.Subscribe(ctx)
	if err != nil {
		t.Fatalf("subscribing to the holder's events: %v", err)
	}
	if st, err := app.Lock(ctx, "demo"); err != nil || st.State != sidecarclient.StateHeld || st.Token != token {
		t.Fatalf("the holder's sidecar through its socket: %+v, %v; want held with token %d", st, err, token)
	}
	select {
	case <-events:
		t.Fatalf("the event stream ended before the kill: %v", <-streamErr)
	default:
	}
	before := containerStatus(holder, inject.ContainerName)
	answers := demoapp.Poll(ctx, "http://"+svcIP+"/", 50*time.Millisecond, nil)
	// The gap logged below runs from the last held answer with the old token, so there must be
	// one before the kill.
	testenv.WaitFor(t, "a held answer with the holder's token through the Service", time.Minute, func() bool {
		for _, a := range answers.Since(0) {
			if a.Err == nil && a.Status.State == sidecarclient.StateHeld && a.Status.Token == token {
				return true
			}
		}
		return false
	})
	if err := c.node.KillContainer(ctx, before.ContainerID); err != nil {
		t.Fatal(err)
	}
	killed := time.Now() // the signal has been sent
	ended := testenv.WaitFor(t, "the app's event stream to end", 30*time.Second, func() bool {
		select {
		case _, open := <-events:
			return !open
		default:
			return false
		}
	})
	t.Logf("event stream ended %s after the kill (%v)", ended.Round(time.Millisecond), <-streamErr)

	var restarts int32
	testenv.WaitFor(t, "the kubelet to restart the sidecar", time.Minute, func() bool {
		p, err := c.kube.CoreV1().Pods(ns).Get(ctx, holder.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		st := containerStatus(*p, inject.ContainerName)
		restarts = st.RestartCount
		return st.RestartCount > before.RestartCount && st.State.Running != nil
	})
	var back demoapp.Answer
	testenv.WaitFor(t, "a held answer with a larger token through the Service", 2*time.Minute, func() bool {
		for _, a := range answers.Since(0) {
			if a.Err == nil && a.Status.State == sidecarclient.StateHeld && a.Status.Token > token {
				back = a
				return true
			}
		}
		return false
	})
	all := answers.Stop()
	var lastOld time.Time
	for _, a := range all {
		if a.Err == nil && a.Status.Token == token && a.At.Before(back.At) {
			lastOld = a.At
		}
		if a.Err == nil && a.At.After(killed) && a.Status.State == sidecarclient.StateHeld && a.Status.Token == token {
			t.Errorf("answer at %v, after the sidecar was killed, still says held with the old token %d", a.At, token)
		}
	}
	t.Logf("sidecar restarted by the kubelet (restart count %d); %s answered held again with token %d after %s (last held answer before the kill to the first after)",
		restarts, back.Status.Pod, back.Status.Token, back.At.Sub(lastOld).Round(time.Millisecond))
}
