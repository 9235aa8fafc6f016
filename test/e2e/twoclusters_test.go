package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batonv1 "github.com/baton-dev/baton/api/v1"
	"github.com/baton-dev/baton/internal/testing/batonnode"
	"github.com/baton-dev/baton/internal/testing/devcluster"
	"github.com/baton-dev/baton/internal/testing/testenv"
)

// clustersNamespace may use scope Global in both clusters of TestGlobalLockAcrossTheNodeAndAnotherCluster
// (it is on the chart's globalNamespaces too).
const clustersNamespace = "baton-clusters"

// kubeB is the second cluster's control plane (its own kube-apiserver and etcd); TestMain stops it.
var kubeB = testenv.NewKubeWithCRDs(filepath.Join("..", "..", "config", "crd", "bases"))

// TestGlobalLockAcrossTheNodeAndAnotherCluster (issue 13, item 4, on the real node): cluster A is
// the real node (kubelet, containerd, the chart's operator), cluster B a second control plane with
// its own operator and node agent; both use the e2e Cassandra's keyspace baton. A DistributedLock
// with scope Global of the same name in each, a pod in B and a Deployment of the demo app in A:
// one holder across the two, which both clusters' status and kubectl get dlock name. When the
// holder's sidecar in B dies (SIGKILL, no release), the pod on the real node is granted the lock
// with a larger token after one observed lease, the kubelet starts its app (Blocking mode) and the
// pod turns Ready, and both clusters show the move.
func TestGlobalLockAcrossTheNodeAndAnotherCluster(t *testing.T) {
	t.Parallel() // mostly waits (on the kubelet, a schedule, a second control plane): runs beside the others of its kind
	a := batonCluster(t)
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	b, err := devcluster.Start(ctx, devcluster.Options{
		Server: kubeB.Config(t), RepoRoot: filepath.Join("..", ".."), CassandraHosts: cassandra.Cluster(t).Hosts(), Keyspace: "baton",
		OperatorArgs: []string{"--status-interval=1s", "--global-namespaces=" + clustersNamespace}, Log: logr.Discard(),
	})
	if err != nil {
		t.Fatalf("starting cluster B: %v", err)
	}
	defer b.Stop()
	name := fmt.Sprintf("clusters-%d", time.Now().UnixNano()%1_000_000)
	global := func(dl *batonv1.DistributedLock) *batonv1.DistributedLock {
		dl.Spec.Scope, dl.Spec.LeaseDuration = batonv1.ScopeGlobal, &metav1.Duration{Duration: 3 * time.Second}
		return dl
	}

	// B first: its pod holds the lock.
	if err := b.CreateNamespace(ctx, clustersNamespace); err != nil {
		t.Fatal(err)
	}
	podB := "b-" + name
	for _, o := range []client.Object{
		global(&batonv1.DistributedLock{ObjectMeta: metav1.ObjectMeta{Namespace: clustersNamespace, Name: name}, Spec: batonv1.DistributedLockSpec{LockIDs: []string{name}}}),
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: clustersNamespace, Name: podB, Annotations: map[string]string{batonv1.AnnotationLock: name}},
			Spec: corev1.PodSpec{ServiceAccountName: devcluster.AppAccount, Containers: []corev1.Container{{Name: "app", Image: "example.com/app:1"}}}},
	} {
		if err := b.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	first := waitHolder(t, ctx, b.Client, name, "cluster B to show its pod holding", func(s batonv1.LockStatus) bool { return s.Holder == podB })
	sidecarB, err := b.Agent.Sidecar(ctx, clustersNamespace, podB)
	if err != nil {
		t.Fatal(err)
	}

	// A, the real node: one replica of the demo app waits for the lock held in B.
	if err := a.client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: clustersNamespace}}); err != nil {
		t.Fatal(err)
	}
	dl, dep, _ := batonnode.Workload{Namespace: clustersNamespace, Name: name, Replicas: 1, Mode: batonv1.ModeBlocking,
		Policy: batonv1.TrafficReadinessGate, Lease: 3 * time.Second}.Objects()
	dep.Name = "a-" + name
	for _, o := range []client.Object{global(dl), dep} {
		if err := a.client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	defer func() {
		_ = a.client.Delete(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: clustersNamespace}})
	}()
	waitHolder(t, ctx, a.client, name, "cluster A to show the holder in cluster B", func(s batonv1.LockStatus) bool {
		return s.Holder == podB && s.HolderNamespace == clustersNamespace && s.Token == first.Token && s.Waiting == 1
	})
	for _, kc := range []string{a.node.Kubeconfig, b.Kubeconfig} {
		kubectlShowsHolder(t, a.kubectl, kc, name, podB, first.Token)
	}

	// B's holder dies without releasing: the pod on the real node takes over.
	died := time.Now()
	sidecarB.Signal(syscall.SIGKILL)
	var podA corev1.Pod
	second := waitHolder(t, ctx, a.client, name, "cluster A to show its own pod holding", func(s batonv1.LockStatus) bool {
		if s.Token <= first.Token || !strings.HasPrefix(s.Holder, dep.Name+"-") {
			return false
		}
		err := a.client.Get(ctx, client.ObjectKey{Namespace: clustersNamespace, Name: s.Holder}, &podA)
		return err == nil
	})
	moved := time.Since(died)
	testenv.WaitFor(t, "the holder's pod on the real node to be Ready (its app started)", time.Minute, func() bool {
		if err := a.client.Get(ctx, client.ObjectKeyFromObject(&podA), &podA); err != nil {
			t.Fatal(err)
		}
		return podReady(podA)
	})
	ready := time.Since(died)
	waitHolder(t, ctx, b.Client, name, "cluster B to show the holder on the real node", func(s batonv1.LockStatus) bool {
		return s.Holder == second.Holder && s.Token == second.Token
	})
	for _, kc := range []string{a.node.Kubeconfig, b.Kubeconfig} {
		kubectlShowsHolder(t, a.kubectl, kc, name, second.Holder, second.Token)
	}
	t.Logf("%s in cluster B held %s (token %d); its sidecar was killed; %s on the real node was shown holding token %d %s later (lease 3s, status every 1s in B, on changes in A) and was Ready %s after the kill",
		podB, name, first.Token, second.Holder, second.Token, moved.Round(100*time.Millisecond), ready.Round(100*time.Millisecond))
}

// waitHolder waits until the DistributedLock name in clustersNamespace, read through c, has a first
// lock status for which ok is true, and returns it.
func waitHolder(t *testing.T, ctx context.Context, c client.Client, name, what string, ok func(batonv1.LockStatus) bool) batonv1.LockStatus {
	t.Helper()
	var st batonv1.LockStatus
	testenv.WaitFor(t, what, time.Minute, func() bool {
		var dl batonv1.DistributedLock
		if err := c.Get(ctx, client.ObjectKey{Namespace: clustersNamespace, Name: name}, &dl); err != nil || len(dl.Status.Locks) == 0 {
			return false
		}
		st = dl.Status.Locks[0]
		return ok(st)
	})
	return st
}

// kubectlShowsHolder checks with the real kubectl that the cluster of kubeconfig names holder and
// token for the DistributedLock name.
func kubectlShowsHolder(t *testing.T, kubectl, kubeconfig, name, holder string, token int64) {
	t.Helper()
	out, err := exec.Command(kubectl, "--kubeconfig", kubeconfig, "get", "dlock", "-n", clustersNamespace, name).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl get dlock: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), holder) || !strings.Contains(string(out), fmt.Sprint(token)) {
		t.Errorf("kubectl --kubeconfig %s get dlock -n %s %s lacks holder %s or token %d:\n%s", kubeconfig, clustersNamespace, name, holder, token, out)
	}
}
