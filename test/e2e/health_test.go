package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	batonv1 "github.com/baton-dev/baton/api/v1"
	"github.com/baton-dev/baton/internal/inject"
	"github.com/baton-dev/baton/internal/testing/batonnode"
	"github.com/baton-dev/baton/internal/testing/images/demoapp"
	"github.com/baton-dev/baton/internal/testing/testenv"
	"github.com/baton-dev/baton/sidecarclient"
)

// TestLockFollowsAppHealth: spec.yieldWhenUnready 3s on the real node, two replicas of the demo
// app with a readiness probe on GET /readyz every second. When the holder's app reports not
// ready, the kubelet marks its container not ready, the holder's sidecar reads that from its pod
// and gives the lock up, and the standby is granted it with the next token, starts its app and
// takes the Service's traffic. The old holder stays out of the queue while its app is not ready
// (the DistributedLock counts no waiter) and queues again once it is. It logs how long each step
// took after the app turned not ready.
func TestLockFollowsAppHealth(t *testing.T) {
	c := batonCluster(t)
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	ns := testenv.Namespace(t, c.client, "health-")
	const yieldWhenUnready = 3 * time.Second
	dl, dep, svc := batonnode.Workload{Namespace: ns, Name: "demo", Replicas: 2, Mode: batonv1.ModeBlocking,
		Policy: batonv1.TrafficReadinessGate, Lease: 5 * time.Second, YieldWhenUnready: yieldWhenUnready}.Objects()
	for _, o := range []client.Object{dl, dep, svc} {
		if err := c.client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	holder, token := waitForOneReady(t, ctx, c, ns, 2)
	answers := demoapp.Poll(ctx, "http://"+svc.Spec.ClusterIP+"/", 50*time.Millisecond, nil)
	defer answers.Stop()

	// The holder's app turns not ready.
	setReady(t, ctx, holder.Status.PodIP, false)
	notReady := time.Now()
	var first demoapp.Answer
	testenv.WaitFor(t, "a held answer from the other pod through the Service", time.Minute, func() bool {
		for _, a := range answers.Since(0) {
			if a.Err == nil && a.Status.Pod != holder.Name && a.Status.State == sidecarclient.StateHeld {
				first = a
				return true
			}
		}
		return false
	})
	served := first.At.Sub(notReady)
	if first.Status.Token <= token {
		t.Fatalf("the new holder %s answered with token %d, want more than the old holder's %d", first.Status.Pod, first.Status.Token, token)
	}
	// yieldWhenUnready, then the kubelet's probe (1s), the sidecar's reading (600ms), the
	// hand-off, the new holder's app start and probe, and kube-proxy.
	if bound := yieldWhenUnready + 10*time.Second; served > bound {
		t.Errorf("the Service answered from the new holder %s after the old holder's app turned not ready, want within %s",
			served.Round(time.Millisecond), bound)
	}
	for _, a := range answers.Since(0) {
		if a.Err == nil && a.Status.Pod == holder.Name && a.Status.State == sidecarclient.StateHeld && a.At.After(first.At) {
			t.Errorf("answer at %v from the old holder saying held, after the new holder answered", a.At)
		}
	}
	testenv.WaitFor(t, "the DistributedLock to name the new holder", time.Minute, func() bool {
		st := lockStatus(t, ctx, c, ns)
		return st.Holder == first.Status.Pod && st.Token == first.Status.Token
	})

	// The old holder's sidecar says why it does not queue, and it does not: no waiter.
	socket := filepath.Join(c.node.EmptyDir(string(holder.UID), inject.SocketVolume), filepath.Base(sidecarclient.SocketPath))
	old := sidecarClient(t, socket)
	st, err := old.Lock(ctx, "demo")
	if err != nil || st.State != sidecarclient.StateIdle || !strings.Contains(st.Reason, "the app was not ready") {
		t.Fatalf("the old holder's sidecar: %+v, %v; want idle, not queueing because the app was not ready", st, err)
	}
	for range 10 {
		if w := lockStatus(t, ctx, c, ns).Waiting; w != 0 {
			t.Fatalf("%d waiting while the old holder's app is not ready, want 0 (it must stay out of the queue)", w)
		}
		time.Sleep(300 * time.Millisecond)
	}

	// Ready again: it queues behind the new holder.
	setReady(t, ctx, holder.Status.PodIP, true)
	queued := testenv.WaitFor(t, "the old holder to queue again", time.Minute, func() bool {
		return lockStatus(t, ctx, c, ns).Waiting == 1
	})
	if st := lockStatus(t, ctx, c, ns); st.Holder != first.Status.Pod || st.Token != first.Status.Token {
		t.Errorf("after the old holder's app was ready again: holder %s token %d, want %s token %d (no hop back)",
			st.Holder, st.Token, first.Status.Pod, first.Status.Token)
	}
	t.Logf("yieldWhenUnready %s: the Service answered from the new holder %s (token %d) %s after the old holder's app turned not ready; the old holder queued again %s after its app was ready (DistributedLock status, which follows the pods' updates)",
		yieldWhenUnready, first.Status.Pod, first.Status.Token, served.Round(time.Millisecond), queued.Round(time.Millisecond))
}

// setReady makes the demo app at podIP ready or not ready (its PUT /readyz).
func setReady(t *testing.T, ctx context.Context, podIP string, ready bool) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, "http://"+podIP+":8080/readyz", strings.NewReader(fmt.Sprint(ready)))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT /readyz %v on %s: %s %s", ready, podIP, resp.Status, body)
	}
}
