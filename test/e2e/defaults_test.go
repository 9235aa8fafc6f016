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

// TestStockDeploymentDefaults: a DistributedLock that sets neither mode nor trafficPolicy, used by
// a stock Deployment (3 replicas, the default RollingUpdate strategy of 25%/25%) and, in another
// namespace at the same time, a stock StatefulSet (3 replicas, OrderedReady, RollingUpdate, a
// headless Service), each carrying nothing but the annotation baton.dev/lock. For each: `kubectl
// rollout status` returns, every pod is Ready, the lock reports RolloutSafe, and a Service that
// selects baton.dev/role=holder has exactly one endpoint: the pod the DistributedLock names as
// holder, which answers through it. Then the same after `kubectl rollout restart`, with the holder
// of the new revision.
func TestStockDeploymentDefaults(t *testing.T) {
	t.Parallel() // mostly waits on the kubelet: runs beside the others of its kind
	c := batonCluster(t)
	ctx, cancel := context.WithTimeout(t.Context(), 6*time.Minute)
	defer cancel()
	// Both workloads go through each step at the same time; the checks, one after the other, then
	// mostly find the other's step done, and the test holds one of -parallel's slots.
	workloads := []*stockWorkload{deployStock(t, ctx, c, "deployment"), deployStock(t, ctx, c, "statefulset")}
	ok := true
	for _, w := range workloads {
		ok = t.Run(w.kind, func(t *testing.T) { w.rolledOut(t, ctx, c, "created") }) && ok
	}
	if !ok {
		return
	}
	for _, w := range workloads {
		w.restart(t)
	}
	for _, w := range workloads {
		t.Run(w.kind+"-restarted", func(t *testing.T) { w.rolledOut(t, ctx, c, "restarted") })
	}
}

// stockWorkload is the demo app under a DistributedLock with the defaults, as a stock workload of
// kind (deployment or statefulset) in namespace ns, and its holder-only Service.
type stockWorkload struct {
	ns, kind  string
	revision  string // the label of a pod that names its revision
	holderSvc *corev1.Service
	kubectl   func(args ...string) (string, error) // in ns
	// holder is the holder found at the last check; restarted is when kubectl rollout restart ran.
	holder    corev1.Pod
	restarted time.Time
	created   time.Time
}

// deployStock creates, in a new namespace, a DistributedLock demo that sets neither mode nor
// trafficPolicy, a stock workload demo of kind that carries nothing but the annotation (3 replicas,
// the API server's default strategy; a StatefulSet with its headless Service), and a Service that
// selects the holder.
func deployStock(t *testing.T, ctx context.Context, c cluster, kind string) *stockWorkload {
	t.Helper()
	ns := testenv.Namespace(t, c.client, "defaults-")
	dl, dep, _ := batonnode.Workload{Namespace: ns, Name: "demo", Replicas: 3, Lease: 5 * time.Second}.Objects()
	if dl.Spec.Mode != "" || dl.Spec.TrafficPolicy != "" {
		t.Fatalf("the DistributedLock sets mode %q, trafficPolicy %q; want both unset", dl.Spec.Mode, dl.Spec.TrafficPolicy)
	}
	w := &stockWorkload{ns: ns, kind: kind, holderSvc: &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "demo-holder", Namespace: ns},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "demo", batonv1.LabelRole: batonv1.RoleHolder},
			Ports:    []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}},
		},
	}}
	w.kubectl = func(args ...string) (string, error) {
		out, err := exec.CommandContext(ctx, c.kubectl, append([]string{"--kubeconfig", c.node.Kubeconfig, "-n", ns}, args...)...).CombinedOutput()
		return string(out), err
	}
	objs := []client.Object{dl, w.holderSvc}
	switch kind {
	case "deployment":
		dep.Spec.Strategy = appsv1.DeploymentStrategy{} // stock: the API server fills in RollingUpdate 25%/25%
		w.revision = appsv1.DefaultDeploymentUniqueLabelKey
		objs = append(objs, dep)
	case "statefulset":
		headless := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "demo-pods", Namespace: ns},
			Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Selector: map[string]string{"app": "demo"},
				Ports: []corev1.ServicePort{{Port: 8080}}},
		}
		sts := &appsv1.StatefulSet{
			ObjectMeta: metav1.ObjectMeta{Name: "demo", Namespace: ns},
			Spec: appsv1.StatefulSetSpec{Replicas: dep.Spec.Replicas, Selector: dep.Spec.Selector, Template: dep.Spec.Template,
				ServiceName: headless.Name}, // stock: OrderedReady, RollingUpdate
		}
		w.revision = appsv1.ControllerRevisionHashLabelKey
		objs = append(objs, headless, sts)
	default:
		t.Fatalf("no stock workload of kind %q", kind)
	}
	for _, o := range objs {
		if err := c.client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	w.created = time.Now()
	return w
}

// rolledOut checks w after it was created, or restarted (then with a holder of the new
// revision): kubectl rollout status returns, one holder behind the holder Service, the lock
// RolloutSafe.
func (w *stockWorkload) rolledOut(t *testing.T, ctx context.Context, c cluster, after string) {
	state := func() string {
		out, _ := w.kubectl("get", w.kind+",pods,endpointslices", "-o", "wide", "--show-labels")
		return out
	}
	since, notRev := w.created, ""
	if after == "restarted" {
		since, notRev = w.restarted, w.holder.Labels[w.revision]
	}
	rolloutStatus(t, w.kubectl, w.kind+"/demo", state)
	t.Logf("kubectl rollout status returned %s after the %s was %s", time.Since(since).Round(100*time.Millisecond), w.kind, after)
	holder := oneHolderBehindService(t, ctx, c, w.ns, w.holderSvc, w.revision, notRev)
	if notRev != "" {
		t.Logf("the lock moved from %s to %s of the new revision %s", w.holder.Name, holder.Name, holder.Labels[w.revision])
	}
	w.holder = holder
	waitForRolloutSafe(t, ctx, c, w.ns, metav1.ConditionTrue, "")
}

// restart runs kubectl rollout restart on w.
func (w *stockWorkload) restart(t *testing.T) {
	t.Helper()
	w.restarted = time.Now()
	if out, err := w.kubectl("rollout", "restart", w.kind+"/demo"); err != nil {
		t.Fatalf("kubectl rollout restart %s: %v\n%s", w.kind, err, out)
	}
}

// rolloutStatus runs kubectl rollout status on workload (kind/name) and fails the test unless it
// returns successfully within 3 minutes, which it does once every replica is updated, Ready and
// available as the workload's status says.
func rolloutStatus(t *testing.T, kubectl func(...string) (string, error), workload string, state func() string) {
	t.Helper()
	out, err := kubectl("rollout", "status", workload, "--timeout=3m")
	if err != nil {
		t.Fatalf("kubectl rollout status: %v\n%s\n%s", err, out, state())
	}
	// A Deployment's last line; a StatefulSet's ("partitioned roll out complete: 3 new pods have
	// been updated...", as the API server sets partition 0).
	if !strings.Contains(out, "successfully rolled out") && !strings.Contains(out, "roll out complete") {
		t.Fatalf("kubectl rollout status: %s\n%s", out, state())
	}
}

// oneHolderBehindService waits until 3 pods of the demo workload (of any revision but notRev, as
// their label revision names it, when set) are all Ready, exactly one is labelled holder and the
// others standby, the DistributedLock names that one as the holder, and svc has exactly one ready
// endpoint, that pod; then it asks the demo app through svc and checks that the holder answers,
// holding.
func oneHolderBehindService(t *testing.T, ctx context.Context, c cluster, ns string, svc *corev1.Service, revision, notRev string) corev1.Pod {
	t.Helper()
	var holder corev1.Pod
	var last string
	took := testenv.WaitFor(t, "3 Ready pods, one holder, the holder Service's only endpoint", 2*time.Minute, func() bool {
		pods := demoPods(t, ctx, c, ns)
		var holders []corev1.Pod
		ready, standby := 0, 0
		for _, p := range pods {
			if podReady(p) && (notRev == "" || p.Labels[revision] != notRev) {
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
