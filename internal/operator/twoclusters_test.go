package operator_test

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	batonv1 "github.com/baton-dev/baton/api/v1"
	"github.com/baton-dev/baton/internal/testing/devcluster"
	"github.com/baton-dev/baton/internal/testing/nodeagent"
	"github.com/baton-dev/baton/internal/testing/testenv"
)

// kubeB is a second control plane (its own kube-apiserver and etcd) for
// TestGlobalLockAcrossTwoClusters; TestMain stops it.
var kubeB = testenv.NewKubeWithCRDs(filepath.Join("..", "..", "config", "crd", "bases"))

// TestGlobalLockAcrossTwoClusters (issue 13, item 4): two clusters, each with its own control
// plane, operator and node agent, share one Cassandra keyspace. A DistributedLock with scope Global
// and the same lock ID in both, and one pod in each, give one holder across the two: each
// cluster's DistributedLock status (and kubectl get dlock) names it, also when it runs in the other
// cluster, as namespace/pod from its sidecar's owner identity. When the holder's sidecar dies
// (SIGKILL, no release), the pod in the other cluster is granted the lock with a larger token after
// one observed lease, and both clusters show the move.
func TestGlobalLockAcrossTwoClusters(t *testing.T) {
	a := up(t)
	b := startSecondCluster(t)
	name := fmt.Sprintf("nightly-%d", time.Now().UnixNano()%1_000_000)
	podA, podB := "report-a-"+name, "report-b-"+name // distinct names: the holder says where it runs
	for _, c := range []struct {
		env *devcluster.Cluster
		pod string
	}{{a, podA}, {b, podB}} {
		if err := c.env.CreateNamespace(context.Background(), globalNamespace); err != nil {
			t.Fatal(err)
		}
		create(t, c.env, newLock(globalNamespace, name, func(d *batonv1.DistributedLock) { d.Spec.Scope = batonv1.ScopeGlobal }))
		create(t, c.env, appPod(globalNamespace, c.pod, name))
	}
	sidecars := map[string]*nodeagent.Sidecar{podA: sidecarOf(t, a, globalNamespace, podA), podB: sidecarOf(t, b, globalNamespace, podB)}

	// One holder, shown by both clusters, whichever runs it.
	held := func(s batonv1.LockStatus) bool { return s.Holder == podA || s.Holder == podB }
	first := waitLock(t, a, globalNamespace, name, "cluster A to show a holder", held)
	sameInB := waitLock(t, b, globalNamespace, name, "cluster B to show the same holder", func(s batonv1.LockStatus) bool {
		return s.Holder == first.Holder && s.Token == first.Token
	})
	if first.HolderNamespace != globalNamespace || sameInB.HolderNamespace != globalNamespace {
		t.Errorf("holder namespaces %q (A) and %q (B), want %s", first.HolderNamespace, sameInB.HolderNamespace, globalNamespace)
	}
	other := podB
	if first.Holder == podB {
		other = podA
	}
	// The sidecars agree: one holds with that token, the other waits and names it.
	testenv.WaitFor(t, "the holder's sidecar to hold and the other's to wait behind it", 30*time.Second, func() bool {
		h, err := sidecars[first.Holder].Client.Lock(context.Background(), name)
		w, err2 := sidecars[other].Client.Lock(context.Background(), name)
		return err == nil && err2 == nil && h.State == "held" && h.Token == first.Token &&
			w.State == "waiting" && w.Holder == globalNamespace+"/"+first.Holder
	})
	kubectlShows(t, a, name, first.Holder, first.Token)
	kubectlShows(t, b, name, first.Holder, first.Token)

	// The holder's sidecar dies without releasing: after one observed lease the pod in the other
	// cluster holds the lock, with a larger token, in both clusters' eyes.
	died := time.Now()
	sidecars[first.Holder].Signal(syscall.SIGKILL)
	moved := func(s batonv1.LockStatus) bool { return s.Holder == other && s.Token > first.Token }
	second := waitLock(t, a, globalNamespace, name, "cluster A to show the lock moved to "+other, moved)
	waitLock(t, b, globalNamespace, name, "cluster B to show the lock moved to "+other, func(s batonv1.LockStatus) bool {
		return s.Holder == other && s.Token == second.Token
	})
	t.Logf("%s held %s (token %d); its sidecar was killed; %s was granted token %d, shown by both clusters %v later",
		first.Holder, name, first.Token, other, second.Token, time.Since(died).Round(100*time.Millisecond))
	kubectlShows(t, a, name, other, second.Token)
	kubectlShows(t, b, name, other, second.Token)
}

// startSecondCluster runs the operator and a node agent on kubeB, on the same Cassandra keyspace
// and with the same settings as the first cluster's.
func startSecondCluster(t *testing.T) *devcluster.Cluster {
	t.Helper()
	cfg := kubeB.Config(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, err := devcluster.Start(ctx, clusterOptions(cfg, cassandra.Cluster(t).Hosts(), filepath.Join(shared.binDir, "sidecar"), "[cluster B] "))
	if err != nil {
		t.Fatalf("starting the second cluster's operator: %v", err)
	}
	t.Cleanup(c.Stop)
	return c
}

// kubectlShows checks with the real kubectl that env's DistributedLock name names holder and token.
func kubectlShows(t *testing.T, env *devcluster.Cluster, name, holder string, token int64) {
	t.Helper()
	out, err := exec.Command(testenv.Kubectl(t), "--kubeconfig", env.Kubeconfig, "get", "dlock", "-n", globalNamespace, name).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl get dlock: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), holder) || !strings.Contains(string(out), fmt.Sprint(token)) {
		t.Errorf("kubectl get dlock -n %s %s lacks holder %s or token %d:\n%s", globalNamespace, name, holder, token, out)
	}
}
