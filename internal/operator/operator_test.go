package operator_test

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	batonv1 "github.com/baton-dev/baton/api/v1"
	"github.com/baton-dev/baton/controllers"
	"github.com/baton-dev/baton/internal/inject"
	"github.com/baton-dev/baton/internal/testing/devcluster"
	"github.com/baton-dev/baton/internal/testing/nodeagent"
	"github.com/baton-dev/baton/internal/testing/testenv"
	"github.com/baton-dev/baton/sidecarclient"
)

func TestOperatorHealthAndLeaderElection(t *testing.T) {
	env := up(t)
	if code := env.Probe("/healthz"); code != 200 {
		t.Errorf("/healthz answered %d", code)
	}
	testenv.WaitFor(t, "a leader-election Lease with a holder", 30*time.Second, func() bool {
		l, err := env.Kube.CoordinationV1().Leases(devcluster.Namespace).Get(context.Background(), "baton-operator.baton.dev", metav1.GetOptions{})
		return err == nil && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != ""
	})
	var body string
	testenv.WaitFor(t, "the operator's metrics, scraped with a token allowed to read them", 30*time.Second, func() bool {
		var err error
		body, err = env.Metrics(context.Background())
		return err == nil
	})
	for _, want := range []string{`controller_runtime_reconcile_total{controller="distributedlock"`, `controller_runtime_reconcile_total{controller="sidecaraccess"`, "workqueue_depth"} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	mwc, err := env.Kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(context.Background(), "baton-inject", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(mwc.Webhooks[0].ClientConfig.CABundle) == 0 {
		t.Error("the operator did not write the caBundle of its MutatingWebhookConfiguration")
	}
}

func newLock(ns, name string, mutate ...func(*batonv1.DistributedLock)) *batonv1.DistributedLock {
	dl := &batonv1.DistributedLock{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       batonv1.DistributedLockSpec{LockIDs: []string{name}, LeaseDuration: &metav1.Duration{Duration: 3 * time.Second}},
	}
	for _, m := range mutate {
		m(dl)
	}
	return dl
}

func create(t *testing.T, env *devcluster.Cluster, obj client.Object) {
	t.Helper()
	if err := env.Client.Create(context.Background(), obj); err != nil {
		t.Fatalf("creating %T %s: %v", obj, obj.GetName(), err)
	}
}

func appPod(ns, name, lockName string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: map[string]string{batonv1.AnnotationLock: lockName}},
		Spec: corev1.PodSpec{ServiceAccountName: devcluster.AppAccount,
			Containers: []corev1.Container{{Name: "app", Image: "example.com/app:1"}}},
	}
}

func TestWebhookAdmitsThroughOperator(t *testing.T) {
	env := up(t)
	ns := newNamespace(t, env, "admit")
	create(t, env, newLock(ns, "orders"))

	pod := appPod(ns, "worker", "orders")
	create(t, env, pod)
	var sc *corev1.Container
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Name == inject.ContainerName {
			sc = &pod.Spec.InitContainers[i]
		}
	}
	if sc == nil || sc.RestartPolicy == nil || *sc.RestartPolicy != corev1.ContainerRestartPolicyAlways {
		t.Fatalf("no native sidecar injected (server v1.37 supports them): init containers %+v", pod.Spec.InitContainers)
	}
	if pod.Labels[batonv1.LabelInjected] != "true" {
		t.Errorf("labels %v lack %s=true", pod.Labels, batonv1.LabelInjected)
	}

	err := env.Client.Create(context.Background(), appPod(ns, "lost", "no-such-lock"))
	if err == nil || !strings.Contains(err.Error(), "DistributedLock "+ns+"/no-such-lock") {
		t.Errorf("pod naming a missing lock: error %v, want one naming %s/no-such-lock", err, ns)
	}

	create(t, env, newLock(ns, "everywhere", func(d *batonv1.DistributedLock) { d.Spec.Scope = batonv1.ScopeGlobal }))
	err = env.Client.Create(context.Background(), appPod(ns, "global", "everywhere"))
	if err == nil || !strings.Contains(err.Error(), "spec.scope Global is not allowed in namespace") {
		t.Errorf("Global lock outside the allow-list: error %v", err)
	}
	waitCondition(t, env, ns, "everywhere", batonv1.ConditionReady, metav1.ConditionFalse, controllers.ReasonScopeNotAllowed)
}

func TestGlobalScopeInAllowedNamespace(t *testing.T) {
	env := up(t)
	if err := env.CreateNamespace(context.Background(), globalNamespace); err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("cluster-singleton-%d", time.Now().UnixNano()%1_000_000)
	create(t, env, newLock(globalNamespace, name, func(d *batonv1.DistributedLock) { d.Spec.Scope = batonv1.ScopeGlobal }))
	create(t, env, appPod(globalNamespace, "worker-"+name, name))
	st := waitLock(t, env, globalNamespace, name, "the Global lock held", func(s batonv1.LockStatus) bool { return s.Holder == "worker-"+name })
	if st.HolderNamespace != globalNamespace {
		t.Errorf("holder namespace %q", st.HolderNamespace)
	}
	waitCondition(t, env, globalNamespace, name, batonv1.ConditionReady, metav1.ConditionTrue, "StatusCurrent")
}

// TestStatusFollowsRealSidecars: sidecar processes started from the injected pods hold the lock on
// the real Cassandra; the operator reports holder, token and waiters, emits HolderChanged on a
// handoff, and revokes the holder by annotation.
func TestStatusFollowsRealSidecars(t *testing.T) {
	env := up(t)
	ns := newNamespace(t, env, "status")
	dl := newLock(ns, "orders")
	create(t, env, dl)
	create(t, env, appPod(ns, "web-a", "orders"))
	a := sidecarOf(t, env, ns, "web-a")
	st := waitLock(t, env, ns, "orders", "web-a holds orders", func(s batonv1.LockStatus) bool { return s.Holder == "web-a" })
	first := st.Token
	create(t, env, appPod(ns, "web-b", "orders"))
	b := sidecarOf(t, env, ns, "web-b")
	waitLock(t, env, ns, "orders", "web-b waiting", func(s batonv1.LockStatus) bool { return s.Holder == "web-a" && s.Waiting == 1 })
	waitEvent(t, env, ns, "orders", controllers.ReasonHolderChanged, fmt.Sprintf("lock orders: nobody -> %s/web-a (token %d)", ns, first))
	// Each sidecar, with its pod-bound token, sets its own pod's readiness condition, and the pod's
	// Ready follows it: only the holder would receive Service traffic.
	testenv.WaitFor(t, "web-a Ready and web-b not", 30*time.Second, func() bool {
		return podCondition(t, env, ns, "web-a", batonv1.ConditionLockHeld) == corev1.ConditionTrue &&
			podCondition(t, env, ns, "web-b", batonv1.ConditionLockHeld) == corev1.ConditionFalse &&
			podCondition(t, env, ns, "web-a", corev1.PodReady) == corev1.ConditionTrue &&
			podCondition(t, env, ns, "web-b", corev1.PodReady) == corev1.ConditionFalse
	})

	got := &batonv1.DistributedLock{}
	if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(dl), got); err != nil {
		t.Fatal(err)
	}
	if got.Status.ObservedGeneration != got.Generation {
		t.Errorf("observedGeneration %d, generation %d", got.Status.ObservedGeneration, got.Generation)
	}
	for _, c := range []string{batonv1.ConditionReady, batonv1.ConditionStoreReachable, batonv1.ConditionRolloutSafe} {
		if !meta.IsStatusConditionTrue(got.Status.Conditions, c) {
			t.Errorf("condition %s not True: %+v", c, got.Status.Conditions)
		}
	}
	if l := got.Status.Locks[0]; l.HolderNamespace != ns || l.AcquiredTime == nil || l.Transitions != 1 {
		t.Errorf("lock status %+v", l)
	}

	// Graceful handoff: a's sidecar releases at SIGTERM; b is granted with a larger token.
	a.Signal(syscall.SIGTERM)
	st = waitLock(t, env, ns, "orders", "web-b holds orders", func(s batonv1.LockStatus) bool { return s.Holder == "web-b" })
	if st.Token <= first {
		t.Errorf("token after handoff %d, want > %d", st.Token, first)
	}
	second := st.Token
	// What a user sees: the real kubectl against the test API server.
	out, err := exec.Command(testenv.Kubectl(t), "--kubeconfig", env.Kubeconfig, "get", "distributedlocks", "-n", ns).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl get distributedlocks: %v\n%s", err, out)
	}
	t.Logf("kubectl get distributedlocks -n %s:\n%s", ns, out)
	for _, want := range []string{"LOCKS", "HOLDER", "TOKEN", "WAITING", "AGE", "web-b", fmt.Sprint(second)} {
		if !strings.Contains(string(out), want) {
			t.Errorf("kubectl output lacks %q", want)
		}
	}
	// The operator may or may not have seen the lock free between the two grants.
	waitEvent(t, env, ns, "orders", controllers.ReasonHolderChanged, fmt.Sprintf(" -> %s/web-b (token %d)", ns, second))

	// The same state as Prometheus metrics.
	// (Prometheus writes a gauge as a float: large tokens come out in exponent form.)
	metric := fmt.Sprintf(`baton_distributedlock_token{distributedlock="orders",lock="orders",namespace=%q} %s`, ns,
		strconv.FormatFloat(float64(second), 'g', -1, 64))
	testenv.WaitFor(t, "metric "+metric, 10*time.Second, func() bool {
		body, err := env.Metrics(context.Background())
		return err == nil && strings.Contains(body, metric)
	})

	// Revocation by annotation: recorded, annotation removed, holder fenced.
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"orders"}}}`, batonv1.AnnotationRevoke)
	if err := env.Client.Patch(context.Background(), got, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		t.Fatal(err)
	}
	st = waitLock(t, env, ns, "orders", "the revocation recorded", func(s batonv1.LockStatus) bool {
		return s.LastRevocation != nil && s.LastRevocation.Token == second
	})
	if st.LastRevocation.Holder != ns+"/web-b" {
		t.Errorf("revocation holder %q", st.LastRevocation.Holder)
	}
	waitEvent(t, env, ns, "orders", controllers.ReasonRevoked, fmt.Sprintf("revoked %s/web-b's grant (token %d)", ns, second))
	testenv.WaitFor(t, "the annotation removed", 10*time.Second, func() bool {
		cur := &batonv1.DistributedLock{}
		err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(dl), cur)
		_, still := cur.Annotations[batonv1.AnnotationRevoke]
		return err == nil && !still
	})
	testenv.WaitFor(t, "web-b's sidecar to stop claiming the revoked grant", 10*time.Second, func() bool {
		l, err := b.Client.Lock(context.Background(), "orders")
		return err == nil && (l.State != sidecarclient.StateHeld || l.Token > second)
	})
	// b's sidecar queues again and, alone, is granted anew once the revoked record aged a lease.
	st = waitLock(t, env, ns, "orders", "a new grant after the revocation", func(s batonv1.LockStatus) bool {
		return s.Holder == "web-b" && s.Token > second
	})
	t.Logf("tokens: web-a %d, web-b %d, revoked, web-b again %d", first, second, st.Token)

	// A revocation names one grant: web-a's long-ended token revokes nothing, and the current
	// holder keeps its grant.
	third := st.Token
	patch = fmt.Sprintf(`{"metadata":{"annotations":{%q:"orders=%d"}}}`, batonv1.AnnotationRevoke, first)
	if err := env.Client.Patch(context.Background(), got, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, env, ns, "orders", controllers.ReasonRevokeGone, fmt.Sprintf("the grant with token %d already ended (the lock is at token %d, held by %s/web-b)", first, third, ns))
	testenv.WaitFor(t, "the stale annotation removed", 10*time.Second, func() bool {
		cur := &batonv1.DistributedLock{}
		err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(dl), cur)
		_, still := cur.Annotations[batonv1.AnnotationRevoke]
		return err == nil && !still
	})
	if l, err := b.Client.Lock(context.Background(), "orders"); err != nil || l.State != sidecarclient.StateHeld || l.Token != third {
		t.Errorf("web-b's grant after a stale revocation: %+v, %v; want held with token %d", l, err, third)
	}
}

func TestRolloutSafeCondition(t *testing.T) {
	env := up(t)
	ns := newNamespace(t, env, "rollout")
	// mode Blocking, set: the app of each pod is held back until it holds the lock, so standbys
	// are never Ready (with mode and trafficPolicy unset a Deployment's pods would all be Ready).
	create(t, env, newLock(ns, "leader", func(d *batonv1.DistributedLock) { d.Spec.Mode = batonv1.ModeBlocking }))
	labels := map[string]string{"app": "web"}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](3),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: map[string]string{batonv1.AnnotationLock: "leader"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "example.com/app:1"}}},
			},
		},
	}
	create(t, env, dep)
	c := waitCondition(t, env, ns, "leader", batonv1.ConditionRolloutSafe, metav1.ConditionFalse, controllers.ReasonRolloutWouldStall)
	for _, want := range []string{"Deployment web", "maxUnavailable 25%", "0 of 3", "100%", "Recreate", "remove spec.mode and spec.trafficPolicy"} {
		if !strings.Contains(c.Message, want) {
			t.Errorf("RolloutSafe message %q lacks %q", c.Message, want)
		}
	}
	waitEvent(t, env, ns, "leader", controllers.ReasonRolloutWouldStall, "Deployment web")
	// The same Event on the Deployment, where kubectl describe and Argo CD show it.
	waitEventOn(t, env, ns, "Deployment", "web", controllers.ReasonRolloutWouldStall, "DistributedLock leader")

	hundred := intstr.FromString("100%")
	dep.Spec.Strategy = appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
		RollingUpdate: &appsv1.RollingUpdateDeployment{MaxUnavailable: &hundred}}
	if err := env.Client.Update(context.Background(), dep); err != nil {
		t.Fatal(err)
	}
	waitCondition(t, env, ns, "leader", batonv1.ConditionRolloutSafe, metav1.ConditionTrue, "RolloutsProceed")
}

func TestStoreUnreachableCondition(t *testing.T) {
	env := up(t)
	ns := newNamespace(t, env, "unreachable")
	create(t, env, newLock(ns, "nowhere", func(d *batonv1.DistributedLock) {
		d.Spec.Cassandra = &batonv1.CassandraConnection{ContactPoints: []string{"127.0.0.1:1"}}
	}))
	c := waitCondition(t, env, ns, "nowhere", batonv1.ConditionStoreReachable, metav1.ConditionFalse, controllers.ReasonStoreUnreachable)
	if !strings.Contains(c.Message, "127.0.0.1:1") {
		t.Errorf("StoreReachable message %q does not name the contact point", c.Message)
	}
	create(t, env, newLock(ns, "nosecret", func(d *batonv1.DistributedLock) {
		d.Spec.Cassandra = &batonv1.CassandraConnection{CredentialsSecretRef: &batonv1.CredentialsSecretRef{Name: "cassandra-creds"}}
	}))
	c = waitCondition(t, env, ns, "nosecret", batonv1.ConditionStoreReachable, metav1.ConditionFalse, controllers.ReasonConnectionNotAllowed)
	if want := "Secret " + ns + "/cassandra-creds named in spec.cassandra.credentialsSecretRef does not exist or lacks the label"; !strings.Contains(c.Message, want) {
		t.Errorf("message %q lacks %q", c.Message, want)
	}
	waitCondition(t, env, ns, "nosecret", batonv1.ConditionReady, metav1.ConditionFalse, controllers.ReasonConnectionNotAllowed)
	create(t, env, newLock(ns, "offlist", func(d *batonv1.DistributedLock) {
		d.Spec.Cassandra = &batonv1.CassandraConnection{ContactPoints: []string{"127.0.0.1:2"}}
	}))
	c = waitCondition(t, env, ns, "offlist", batonv1.ConditionStoreReachable, metav1.ConditionFalse, controllers.ReasonConnectionNotAllowed)
	if want := "[127.0.0.1:2] are not on the operator's allow-list"; !strings.Contains(c.Message, want) {
		t.Errorf("message %q lacks %q", c.Message, want)
	}
}

// waitCondition waits for condition typ of DistributedLock ns/name to have status and reason.
func waitCondition(t *testing.T, env *devcluster.Cluster, ns, name, typ string, status metav1.ConditionStatus, reason string) metav1.Condition {
	t.Helper()
	var c metav1.Condition
	testenv.WaitFor(t, fmt.Sprintf("condition %s=%s (%s) on %s/%s", typ, status, reason, ns, name), 60*time.Second, func() bool {
		dl := &batonv1.DistributedLock{}
		if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, dl); err != nil {
			return false
		}
		p := meta.FindStatusCondition(dl.Status.Conditions, typ)
		if p == nil || p.Status != status || p.Reason != reason {
			return false
		}
		c = *p
		return true
	})
	return c
}

// waitLock waits until the status of the first lock of ns/name satisfies ok.
func waitLock(t *testing.T, env *devcluster.Cluster, ns, name, what string, ok func(batonv1.LockStatus) bool) batonv1.LockStatus {
	t.Helper()
	var st batonv1.LockStatus
	testenv.WaitFor(t, what, 60*time.Second, func() bool {
		dl := &batonv1.DistributedLock{}
		if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, dl); err != nil || len(dl.Status.Locks) == 0 {
			return false
		}
		st = dl.Status.Locks[0]
		return ok(st)
	})
	return st
}

// waitEvent waits for an Event about DistributedLock ns/name with reason whose note contains note.
func waitEvent(t *testing.T, env *devcluster.Cluster, ns, name, reason, note string) eventsv1.Event {
	t.Helper()
	return waitEventOn(t, env, ns, "DistributedLock", name, reason, note)
}

// waitEventOn waits for an Event regarding the object kind ns/name with reason and a note that
// contains note.
func waitEventOn(t *testing.T, env *devcluster.Cluster, ns, kind, name, reason, note string) eventsv1.Event {
	t.Helper()
	var found eventsv1.Event
	testenv.WaitFor(t, fmt.Sprintf("event %s %q", reason, note), 30*time.Second, func() bool {
		list, err := env.Kube.EventsV1().Events(ns).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return false
		}
		for _, e := range list.Items {
			if e.Regarding.Kind == kind && e.Regarding.Name == name && e.Reason == reason && strings.Contains(e.Note, note) {
				found = e
				return true
			}
		}
		return false
	})
	return found
}

// sidecarOf waits for the node agent to run the sidecar of pod ns/name.
func sidecarOf(t *testing.T, env *devcluster.Cluster, ns, name string) *nodeagent.Sidecar {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := env.Agent.Sidecar(ctx, ns, name)
	if err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, "sidecar of "+name+" to serve its socket", 30*time.Second, func() bool {
		_, err := s.Client.Locks(context.Background())
		return err == nil
	})
	return s
}

// podCondition returns the status of condition typ of pod ns/name ("" if unset).
func podCondition(t *testing.T, env *devcluster.Cluster, ns, name string, typ corev1.PodConditionType) corev1.ConditionStatus {
	t.Helper()
	pod, err := env.Kube.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == typ {
			return c.Status
		}
	}
	return ""
}

// TestWebhookDeniesConnectionsTheOperatorRefuses: a pod whose DistributedLock names a contact point
// off the operator's allow-list, or a Secret not labelled for baton, is not injected. Its sidecar
// would otherwise make the connection the operator refuses, with that Secret mounted: a lock
// author could send any Secret of the namespace to a host of their choosing.
func TestWebhookDeniesConnectionsTheOperatorRefuses(t *testing.T) {
	env := up(t)
	ns := newNamespace(t, env, "deputy")
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db-admin"},
		StringData: map[string]string{"user": "admin", "pass": "s3cret"}}
	create(t, env, secret)
	create(t, env, newLock(ns, "elsewhere", func(d *batonv1.DistributedLock) {
		d.Spec.Cassandra = &batonv1.CassandraConnection{ContactPoints: []string{"198.18.0.9:9042"}}
	}))
	create(t, env, newLock(ns, "unlabelled", func(d *batonv1.DistributedLock) {
		d.Spec.Cassandra = &batonv1.CassandraConnection{Keyspace: keyspace,
			CredentialsSecretRef: &batonv1.CredentialsSecretRef{Name: secret.Name, UsernameKey: "user", PasswordKey: "pass"}}
	}))
	for lock, want := range map[string]string{
		"elsewhere":  "198.18.0.9:9042",
		"unlabelled": "lacks the label " + batonv1.LabelCassandraSecret + "=true",
	} {
		err := env.Client.Create(context.Background(), appPod(ns, "worker-"+lock, lock))
		if err == nil || !strings.Contains(err.Error(), "the operator refuses its Cassandra connection") || !strings.Contains(err.Error(), want) {
			t.Errorf("pod of lock %s: error %v; want a denial that says the operator refuses the connection (%q)", lock, err, want)
		}
	}

	// Once whoever manages the Secret labels it for baton, the pod is injected.
	secret.Labels = map[string]string{batonv1.LabelCassandraSecret: "true"}
	if err := env.Client.Update(context.Background(), secret); err != nil {
		t.Fatal(err)
	}
	pod := appPod(ns, "worker-labelled", "unlabelled")
	create(t, env, pod)
	if pod.Labels[batonv1.LabelInjected] != "true" {
		t.Errorf("pod of a lock with a labelled Secret: labels %v lack %s=true", pod.Labels, batonv1.LabelInjected)
	}
}
