package e2e

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batonv1 "github.com/baton-dev/baton/api/v1"
	"github.com/baton-dev/baton/internal/testing/batonnode"
	"github.com/baton-dev/baton/internal/testing/images/demoapp"
	"github.com/baton-dev/baton/internal/testing/testenv"
	"github.com/baton-dev/baton/sidecarclient"
)

// TestStockDeploymentDefaults: a DistributedLock that sets neither mode nor trafficPolicy, and a
// stock Deployment (3 replicas, the default RollingUpdate strategy of 25%/25%) that carries
// nothing but the annotation baton.dev/lock. `kubectl rollout status` returns, every pod is
// Ready, the lock reports RolloutSafe, and a Service that selects baton.dev/role=holder has
// exactly one endpoint: the pod the DistributedLock names as holder, which answers through it.
// Then the same after `kubectl rollout restart`, with the holder of the new revision.
func TestStockDeploymentDefaults(t *testing.T) {
	t.Parallel() // mostly waits on the kubelet: runs beside the others of its kind
	c := batonCluster(t)
	ctx, cancel := context.WithTimeout(t.Context(), 6*time.Minute)
	defer cancel()
	ns := testenv.Namespace(t, c.client, "defaults-")
	dl, dep, _ := batonnode.Workload{Namespace: ns, Name: "demo", Replicas: 3, Lease: 5 * time.Second}.Objects()
	if dl.Spec.Mode != "" || dl.Spec.TrafficPolicy != "" {
		t.Fatalf("the DistributedLock sets mode %q, trafficPolicy %q; want both unset", dl.Spec.Mode, dl.Spec.TrafficPolicy)
	}
	dep.Spec.Strategy = appsv1.DeploymentStrategy{} // stock: the API server fills in RollingUpdate 25%/25%
	holderSvc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "demo-holder", Namespace: ns},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "demo", batonv1.LabelRole: batonv1.RoleHolder},
			Ports:    []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}},
		},
	}
	for _, o := range []client.Object{dl, dep, holderSvc} {
		if err := c.client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	kubectl := func(args ...string) (string, error) {
		out, err := exec.CommandContext(ctx, c.kubectl, append([]string{"--kubeconfig", c.node.Kubeconfig, "-n", ns}, args...)...).CombinedOutput()
		return string(out), err
	}
	state := func() string {
		out, _ := kubectl("get", "deploy,rs,pods,endpointslices", "-o", "wide", "--show-labels")
		return out
	}

	start := time.Now()
	rolledOut(t, kubectl, state)
	t.Logf("kubectl rollout status returned %s after the Deployment was created", time.Since(start).Round(100*time.Millisecond))
	holder := oneHolderBehindService(t, ctx, c, ns, holderSvc, "")
	waitForRolloutSafe(t, ctx, c, ns, metav1.ConditionTrue, "")

	start = time.Now()
	if out, err := kubectl("rollout", "restart", "deployment/demo"); err != nil {
		t.Fatalf("kubectl rollout restart: %v\n%s", err, out)
	}
	rolledOut(t, kubectl, state)
	t.Logf("kubectl rollout status returned %s after kubectl rollout restart", time.Since(start).Round(100*time.Millisecond))
	newHolder := oneHolderBehindService(t, ctx, c, ns, holderSvc, holder.Labels["pod-template-hash"])
	t.Logf("the lock moved from %s to %s of the new revision %s", holder.Name, newHolder.Name, newHolder.Labels["pod-template-hash"])
}

// rolledOut runs kubectl rollout status on the demo Deployment and fails the test unless it
// returns successfully within 3 minutes, and unless every replica is updated, Ready and
// available as the Deployment's status and its pods say.
func rolledOut(t *testing.T, kubectl func(...string) (string, error), state func() string) {
	t.Helper()
	out, err := kubectl("rollout", "status", "deployment/demo", "--timeout=3m")
	if err != nil {
		t.Fatalf("kubectl rollout status: %v\n%s\n%s", err, out, state())
	}
	if !strings.Contains(out, "successfully rolled out") {
		t.Fatalf("kubectl rollout status: %s\n%s", out, state())
	}
}

// oneHolderBehindService waits until 3 pods of the demo Deployment (of any revision but notRev,
// when set) are all Ready, exactly one is labelled holder and the others standby, the
// DistributedLock names that one as the holder, and svc has exactly one ready endpoint, that
// pod; then it asks the demo app through svc and checks that the holder answers, holding.
func oneHolderBehindService(t *testing.T, ctx context.Context, c cluster, ns string, svc *corev1.Service, notRev string) corev1.Pod {
	t.Helper()
	var holder corev1.Pod
	var last string
	took := testenv.WaitFor(t, "3 Ready pods, one holder, the holder Service's only endpoint", 2*time.Minute, func() bool {
		pods := demoPods(t, ctx, c, ns)
		var holders []corev1.Pod
		ready, standby := 0, 0
		for _, p := range pods {
			if podReady(p) && p.Labels["pod-template-hash"] != notRev {
				ready++
			}
			switch p.Labels[batonv1.LabelRole] {
			case batonv1.RoleHolder:
				holders = append(holders, p)
			case batonv1.RoleStandby:
				standby++
			}
		}
		eps := endpointPods(t, ctx, c, ns, svc.Name)
		last = strings.Join(eps, ",")
		if len(pods) != 3 || ready != 3 || len(holders) != 1 || standby != 2 || len(eps) != 1 {
			return false
		}
		holder = holders[0]
		return eps[0] == holder.Name && lockStatus(t, ctx, c, ns).Holder == holder.Name
	})
	t.Logf("%s holds the lock and is the holder Service's only endpoint; 3 pods Ready (waited %s; endpoints %s)",
		holder.Name, took.Round(time.Millisecond), last)
	url := "http://" + svc.Spec.ClusterIP + "/"
	testenv.WaitFor(t, "kube-proxy to send the holder Service to "+holder.Name, time.Minute, func() bool {
		st, err := demoapp.Ask(ctx, url) // refused until kube-proxy has synced the endpoint
		return err == nil && st.Pod == holder.Name
	})
	for range 10 {
		st, err := demoapp.Ask(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		if st.Pod != holder.Name || st.State != sidecarclient.StateHeld {
			t.Fatalf("answer %+v through the holder Service, want %s holding", st, holder.Name)
		}
	}
	return holder
}

// endpointPods returns the pods behind the ready endpoints of a Service, over its EndpointSlices.
func endpointPods(t *testing.T, ctx context.Context, c cluster, ns, service string) []string {
	t.Helper()
	slices, err := c.kube.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=" + service})
	if err != nil {
		t.Fatalf("endpoint slices of %s: %v", service, err)
	}
	var out []string
	for _, s := range slices.Items {
		for _, e := range s.Endpoints {
			if (e.Conditions.Ready == nil || *e.Conditions.Ready) && e.TargetRef != nil {
				out = append(out, e.TargetRef.Name)
			}
		}
	}
	return out
}
