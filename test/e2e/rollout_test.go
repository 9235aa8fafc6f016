package e2e

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batonv1 "github.com/baton-dev/baton/api/v1"
	"github.com/baton-dev/baton/internal/testing/testenv"
)

// TestRolloutRestart: with the user guide's settings (maxUnavailable 100%) `kubectl rollout restart`
// replaces every pod under ReadinessGate and Blocking, and the lock moves to a pod of the new
// revision with a larger token; the operator reports RolloutSafe True. With the default maxUnavailable
// (25%) the operator reports RolloutSafe False, naming the Deployment and the setting.
func TestRolloutRestart(t *testing.T) {
	t.Parallel() // mostly waits (on the kubelet, a schedule, a second control plane): runs beside the others of its kind
	c := batonCluster(t)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	ns := testenv.Namespace(t, c.client, "rollout-")
	deployDemo(t, ctx, c, ns, 3, batonv1.ModeBlocking, batonv1.TrafficReadinessGate)
	old, token := waitForOneReady(t, ctx, c, ns, 3)
	waitForRolloutSafe(t, ctx, c, ns, metav1.ConditionTrue, "")

	start := time.Now()
	kubectl := func(args ...string) string {
		t.Helper()
		out, err := exec.CommandContext(ctx, c.kubectl, append([]string{"--kubeconfig", c.node.Kubeconfig, "-n", ns}, args...)...).CombinedOutput()
		if err != nil {
			state, _ := exec.Command(c.kubectl, "--kubeconfig", c.node.Kubeconfig, "-n", ns, "get", "deploy,rs,pods", "-o", "wide").CombinedOutput()
			t.Fatalf("kubectl %s: %v\n%s\n%s", strings.Join(args, " "), err, out, state)
		}
		return string(out)
	}
	kubectl("rollout", "restart", "deployment/demo")
	// Done as far as the Deployment controller goes: every replica of the new revision, none of
	// the old. `kubectl rollout status` never says so here: it waits for every updated replica to
	// be available, and under ReadinessGate only the holder ever is.
	testenv.WaitFor(t, "every replica of the new revision and none of the old", 3*time.Minute, func() bool {
		var d appsv1.Deployment
		if err := c.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "demo"}, &d); err != nil {
			t.Fatal(err)
		}
		return d.Status.ObservedGeneration >= d.Generation && d.Status.UpdatedReplicas == 3 && d.Status.Replicas == 3
	})
	t.Logf("rollout restart done after %s", time.Since(start).Round(100*time.Millisecond))

	holder, newToken := waitForOneReady(t, ctx, c, ns, 3)
	if holder.Labels["pod-template-hash"] == old.Labels["pod-template-hash"] {
		t.Errorf("holder %s is of the old revision %s", holder.Name, old.Labels["pod-template-hash"])
	}
	if newToken <= token {
		t.Errorf("holder of the new revision has token %d, want more than %d", newToken, token)
	}
	t.Logf("the lock moved from %s (token %d) to %s (token %d) in %s",
		old.Name, token, holder.Name, newToken, time.Since(start).Round(100*time.Millisecond))

	// Never complete, the Deployment is reported as stuck once its progress deadline has passed
	// (600 s by default; 10 s here): its Progressing condition turns False, reason
	// ProgressDeadlineExceeded, although nothing is wrong. Alerts on that condition must leave such
	// Deployments out (the user guide says so).
	var dep appsv1.Deployment
	if err := c.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "demo"}, &dep); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(dep.DeepCopy())
	dep.Spec.ProgressDeadlineSeconds = ptr(int32(10))
	if err := c.client.Patch(ctx, &dep, patch); err != nil {
		t.Fatal(err)
	}
	deadlinePatched := time.Now()
	testenv.WaitFor(t, "Progressing False with ProgressDeadlineExceeded", 2*time.Minute, func() bool {
		if err := c.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "demo"}, &dep); err != nil {
			t.Fatal(err)
		}
		for _, cond := range dep.Status.Conditions {
			if cond.Type == appsv1.DeploymentProgressing {
				return cond.Status == "False" && cond.Reason == "ProgressDeadlineExceeded"
			}
		}
		return false
	})
	t.Logf("Progressing False, ProgressDeadlineExceeded, %s after progressDeadlineSeconds was set to 10 (%d of %d replicas available)",
		time.Since(deadlinePatched).Round(100*time.Millisecond), dep.Status.AvailableReplicas, dep.Status.Replicas)
	if got := lockStatus(t, ctx, c, ns); got.Holder != holder.Name || got.Token != newToken {
		t.Errorf("the lock moved while the Deployment was reported stuck: holder %s token %d", got.Holder, got.Token)
	}

	// The same Deployment with the default maxUnavailable (25%) would stall: reported.
	patch = client.MergeFrom(dep.DeepCopy())
	dep.Spec.Strategy.RollingUpdate.MaxUnavailable = nil
	if err := c.client.Patch(ctx, &dep, patch); err != nil {
		t.Fatal(err)
	}
	waitForRolloutSafe(t, ctx, c, ns, metav1.ConditionFalse, "Deployment demo")
}

// waitForRolloutSafe waits for the DistributedLock's RolloutSafe condition to have status, with
// a message containing mention.
func waitForRolloutSafe(t *testing.T, ctx context.Context, c cluster, ns string, status metav1.ConditionStatus, mention string) {
	t.Helper()
	var last string
	testenv.WaitFor(t, "RolloutSafe "+string(status), time.Minute, func() bool {
		var dl batonv1.DistributedLock
		if err := c.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "demo"}, &dl); err != nil {
			t.Fatal(err)
		}
		cond := meta.FindStatusCondition(dl.Status.Conditions, batonv1.ConditionRolloutSafe)
		if cond == nil {
			return false
		}
		last = cond.Message
		return cond.Status == status && strings.Contains(cond.Message, mention)
	})
	if status == metav1.ConditionFalse {
		t.Logf("RolloutSafe False: %s", last)
	}
}
