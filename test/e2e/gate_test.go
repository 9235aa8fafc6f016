package e2e

import (
	"context"
	"os/exec"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batonv1 "github.com/baton-dev/baton/api/v1"
	"github.com/baton-dev/baton/internal/inject"
	"github.com/baton-dev/baton/internal/testing/batonnode"
	"github.com/baton-dev/baton/internal/testing/images/demoapp"
	"github.com/baton-dev/baton/internal/testing/testenv"
	"github.com/baton-dev/baton/sidecarclient"
)

// TestReadinessGateSendsTrafficOnlyToTheHolder runs the user guide's Deployment on the real node: 3
// replicas of the demo app behind a Service, one Blocking lock with the ReadinessGate policy and
// the recommended rollout settings. Exactly one pod is Ready, the kubelet starts the app
// containers of the others only once they hold the lock (the sidecar's startup probe), every
// answer through the Service comes from the holder, and when the holder is deleted the answers
// move to the next holder, whose token is larger. It logs the traffic failover: from the last
// answer of the old holder to the first of the new.
func TestReadinessGateSendsTrafficOnlyToTheHolder(t *testing.T) {
	c := batonCluster(t)
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	ns := testenv.Namespace(t, c.client, "gate-")
	svcIP := deployDemo(t, ctx, c, ns, 3, batonv1.ModeBlocking, batonv1.TrafficReadinessGate)

	holder, token := waitForOneReady(t, ctx, c, ns, 3)
	t.Logf("holder %s, token %d", holder.Name, token)
	for _, p := range demoPods(t, ctx, c, ns) {
		app, sidecar := containerState(p, "app"), initContainerState(p, inject.ContainerName)
		if p.Name == holder.Name {
			if app.Running == nil || sidecar.Running == nil {
				t.Fatalf("holder %s: app %+v, sidecar %+v, want both running", p.Name, app, sidecar)
			}
			if app.Running.StartedAt.Before(&sidecar.Running.StartedAt) {
				t.Errorf("holder %s: app started at %v, before its sidecar (%v)", p.Name, app.Running.StartedAt, sidecar.Running.StartedAt)
			}
			continue
		}
		if app.Running != nil || app.Terminated != nil {
			t.Errorf("standby %s: app container %+v; in Blocking mode it must wait for the lock", p.Name, app)
		}
		if sidecar.Running == nil {
			t.Errorf("standby %s: sidecar %+v, want running (waiting for the lock)", p.Name, sidecar)
		}
	}

	// Every answer through the Service comes from the holder, with its token.
	for range 20 {
		st, err := demoapp.Ask(ctx, "http://"+svcIP+"/")
		if err != nil {
			t.Fatal(err)
		}
		if st.Pod != holder.Name || st.State != sidecarclient.StateHeld || st.Token != token {
			t.Fatalf("answer %+v through the Service; want the holder %s with token %d", st, holder.Name, token)
		}
	}

	// Graceful delete of the holder: the answers move to the next holder.
	oldLogs := followLogs(t, ctx, c, ns, holder.Name)
	answers := demoapp.Poll(ctx, "http://"+svcIP+"/", 50*time.Millisecond, nil)
	if err := c.kube.CoreV1().Pods(ns).Delete(ctx, holder.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	var next demoapp.Status
	testenv.WaitFor(t, "an answer from the next holder", 2*time.Minute, func() bool {
		for _, a := range answers.Since(0) {
			if a.Err == nil && a.Status.Pod != holder.Name {
				next = a.Status
				return true
			}
		}
		return false
	})
	time.Sleep(time.Second) // a second more of answers, to see that the old holder stays silent
	all := answers.Stop()
	if next.State != sidecarclient.StateHeld || next.Token <= token {
		t.Errorf("first answer from the next holder %+v; want held with a token above %d", next, token)
	}
	lastOld, firstNew, failed := demoapp.Failover(all, holder.Name)
	t.Logf("traffic failover on a graceful delete: %s (last answer from %s to the first from %s; %d requests failed in between)",
		firstNew.Sub(lastOld).Round(time.Millisecond), holder.Name, next.Pod, failed)
	if firstNew.Sub(lastOld) > 5*time.Second { // longer than a lease: say what the old holder did
		t.Logf("the old holder's containers logged:\n%s", oldLogs.String())
	}
	for _, a := range all {
		if a.Err == nil && a.At.After(firstNew) && a.Status.Pod == holder.Name {
			t.Errorf("the old holder answered at %v, after the new one had", a.At)
		}
		if a.Err == nil && a.Status.Pod != holder.Name && a.Status.Pod != next.Pod {
			t.Errorf("answer from %s, neither the old nor the new holder", a.Status.Pod)
		}
	}
	if got := lockStatus(t, ctx, c, ns); got.Holder != next.Pod || got.Token != next.Token {
		t.Errorf("DistributedLock status: holder %s token %d; the Service answered from %s with %d", got.Holder, got.Token, next.Pod, next.Token)
	}
}

// followLogs follows every container's log of a pod (kubectl logs -f) until ctx ends; the
// kubelet deletes a pod's logs with the pod.
func followLogs(t *testing.T, ctx context.Context, c cluster, ns, pod string) *testenv.SyncBuffer {
	t.Helper()
	out := &testenv.SyncBuffer{}
	cmd := exec.CommandContext(ctx, c.kubectl, "--kubeconfig", c.node.Kubeconfig, "logs", "-f", "-n", ns, pod,
		"--all-containers", "--prefix", "--timestamps")
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return out
}

// deployDemo creates the workload of the user guide (batonnode.Workload "demo", 5 s lease) and
// returns its Service's cluster IP.
func deployDemo(t *testing.T, ctx context.Context, c cluster, ns string, replicas int32, mode batonv1.LockMode, policy batonv1.TrafficPolicy) string {
	t.Helper()
	dl, dep, svc := batonnode.Workload{Namespace: ns, Name: "demo", Replicas: replicas, Mode: mode, Policy: policy,
		Lease: 5 * time.Second}.Objects()
	for _, o := range []client.Object{dl, dep, svc} {
		if err := c.client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	return svc.Spec.ClusterIP
}

func demoPods(t *testing.T, ctx context.Context, c cluster, ns string) []corev1.Pod {
	t.Helper()
	var pods corev1.PodList
	if err := c.client.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{"app": "demo"}); err != nil {
		t.Fatal(err)
	}
	var live []corev1.Pod
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			live = append(live, p)
		}
	}
	return live
}

// waitForOneReady waits until replicas pods exist, exactly one of them is Ready, and the
// DistributedLock's status names it as the holder; it returns that pod and the token.
func waitForOneReady(t *testing.T, ctx context.Context, c cluster, ns string, replicas int) (corev1.Pod, int64) {
	t.Helper()
	var holder corev1.Pod
	var token int64
	took := testenv.WaitFor(t, "exactly one Ready pod, named holder by the DistributedLock", 2*time.Minute, func() bool {
		pods := demoPods(t, ctx, c, ns)
		var ready []corev1.Pod
		for _, p := range pods {
			if podReady(p) {
				ready = append(ready, p)
			}
		}
		if len(pods) != replicas || len(ready) != 1 {
			return false
		}
		st := lockStatus(t, ctx, c, ns)
		holder, token = ready[0], st.Token
		return st.Holder == holder.Name
	})
	t.Logf("one of %d pods Ready and named holder by the DistributedLock (waited %s)", replicas, took.Round(time.Millisecond))
	// It stays that way: no second pod becomes Ready.
	for range 10 {
		ready := 0
		for _, p := range demoPods(t, ctx, c, ns) {
			if podReady(p) {
				ready++
			}
		}
		if ready != 1 {
			t.Fatalf("%d pods Ready, want exactly 1", ready)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return holder, token
}

func lockStatus(t *testing.T, ctx context.Context, c cluster, ns string) batonv1.LockStatus {
	t.Helper()
	var dl batonv1.DistributedLock
	if err := c.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "demo"}, &dl); err != nil {
		t.Fatal(err)
	}
	if len(dl.Status.Locks) == 0 {
		return batonv1.LockStatus{}
	}
	return dl.Status.Locks[0]
}

func containerState(p corev1.Pod, name string) corev1.ContainerState {
	for _, s := range p.Status.ContainerStatuses {
		if s.Name == name {
			return s.State
		}
	}
	return corev1.ContainerState{}
}

func initContainerState(p corev1.Pod, name string) corev1.ContainerState {
	for _, s := range p.Status.InitContainerStatuses {
		if s.Name == name {
			return s.State
		}
	}
	return corev1.ContainerState{}
}

func containerStatus(p corev1.Pod, name string) corev1.ContainerStatus {
	for _, list := range [][]corev1.ContainerStatus{p.Status.InitContainerStatuses, p.Status.ContainerStatuses} {
		for _, s := range list {
			if s.Name == name {
				return s
			}
		}
	}
	return corev1.ContainerStatus{}
}
