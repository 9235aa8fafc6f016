package sidecaraccess_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	batonv1 "github.com/baton-dev/baton/api/v1"
	"github.com/baton-dev/baton/lock/memstore"
	"github.com/baton-dev/baton/sidecar"
)

// policyDenial is how the API server introduces a denial by the policy.
const policyDenial = "ValidatingAdmissionPolicy 'baton-sidecar-own-pod'"

// Extra keys of a pod-bound service-account token's user.
const (
	extraPodName = "authentication.kubernetes.io/pod-name"
	extraPodUID  = "authentication.kubernetes.io/pod-uid"
)

var (
	held    = sidecar.GateState{Held: true, Reason: "LockHeld", Message: "holding job (token 1)"}
	standby = sidecar.GateState{Reason: "WaitingForLock", Message: "job: waiting"}
)

func TestPolicyLimitsSidecarToItsOwnPod(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	dl := newLock(f.ns, "jobs", batonv1.TrafficReadinessGate)
	create(t, f.c, dl,
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "worker"}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "bystander"}})
	// a and b are injected and share the service account worker; c is not injected.
	a, b := newPod(f.ns, "a", "worker", dl.Name, true), newPod(f.ns, "b", "worker", dl.Name, true)
	c := newPod(f.ns, "c", "bystander", "", false)
	create(t, f.c, a, b, c)
	// There is no kubelet: give a and b the status one would, so that the sidecar's writes are
	// checked against pods with other conditions and status fields.
	for _, p := range []*corev1.Pod{a, b} {
		runLikeKubelet(t, f, p)
	}
	expectAccess(t, f, statusRole, "worker")

	asA := tokenClient(t, f, token(t, f, "worker", a))

	// The API server tells who the token belongs to, including the pod it is bound to: the claims
	// the policy checks.
	review, err := asA.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	user := review.Status.UserInfo
	if want := "system:serviceaccount:" + f.ns + ":worker"; user.Username != want {
		t.Errorf("token of pod a authenticates as %q, want %q", user.Username, want)
	}
	if got := user.Extra[extraPodName]; !slices.Equal(got, authenticationv1.ExtraValue{"a"}) {
		t.Errorf("extra %s = %v, want [a] (all extra: %v)", extraPodName, got, user.Extra)
	}
	if got := user.Extra[extraPodUID]; !slices.Equal(got, authenticationv1.ExtraValue{string(a.UID)}) {
		t.Errorf("extra %s = %v, want [%s]", extraPodUID, got, a.UID)
	}

	// The policy takes effect a moment after it is created, and the RoleBinding a moment after
	// the reconcile: wait until pod a's token is refused on pod b by the policy. (Until then the
	// probe may be refused by RBAC, or let through.)
	eventually(t, "the policy refuses pod a's token on pod b", func(ctx context.Context) (bool, string) {
		err := patchStatus(ctx, asA, b, conditionPatch("False", "Probe"))
		return err != nil && strings.Contains(err.Error(), policyDenial), fmt.Sprintf("patch: %v", err)
	})

	// The sidecar of pod a, writing with the sidecar's own code, may set its own condition.
	gateA := newGate(t, asA, a, batonv1.TrafficReadinessGate)
	if err := gateA.Apply(ctx, held); err != nil {
		t.Fatalf("sidecar of pod a setting its own condition: %v", err)
	}
	expectCondition(t, f, a, "True")
	if err := gateA.Apply(ctx, standby); err != nil {
		t.Fatalf("sidecar of pod a clearing its own condition: %v", err)
	}
	expectCondition(t, f, a, "False")

	// With yieldWhenUnready the sidecar reads its own pod's app readiness from the answer to a
	// patch of its status that changes nothing (it has no get on pods): allowed, and not written.
	before := getPod(t, f, a).ResourceVersion
	if r, err := podWatch(t, asA, a).Read(ctx); err != nil || !r.AppReady {
		t.Fatalf("sidecar of pod a reading its app's readiness: %+v, %v; want ready", r, err)
	}
	if after := getPod(t, f, a); after.ResourceVersion != before {
		t.Errorf("reading pod a's readiness wrote it: resourceVersion %s, was %s", after.ResourceVersion, before)
	}
	notReady := getPod(t, f, a)
	notReady.Status.ContainerStatuses[0].Ready = false
	if err := f.c.Status().Update(ctx, notReady); err != nil {
		t.Fatal(err)
	}
	if r, err := podWatch(t, asA, a).Read(ctx); err != nil || r.AppReady || r.Detail != "container app not ready" {
		t.Fatalf("sidecar of pod a reading its unready app: %+v, %v; want not ready (container app not ready)", r, err)
	}
	runLikeKubelet(t, f, getPod(t, f, a))
	// With handoff NewestRevision it answers the operator's superseded mark with the condition
	// baton.dev/stepped-aside, and withdraws it, conditioned on the pod it read, once the mark is
	// gone: both allowed.
	stepAsideWatch(t, asA, a, func() {
		const mark = "revision 1 of Deployment/web superseded"
		setAnnotation(t, f, a, batonv1.AnnotationSuperseded, mark)
		eventually(t, "pod a's sidecar steps aside", func(context.Context) (bool, string) {
			got := sidecar.SteppedAsideFor(getPod(t, f, a))
			return got == mark, fmt.Sprintf("stepped aside for %q", got)
		})
		setAnnotation(t, f, a, batonv1.AnnotationSuperseded, "")
		eventually(t, "pod a's sidecar withdraws stepped-aside", func(context.Context) (bool, string) {
			st := steppedAsideCondition(getPod(t, f, a))
			return st == corev1.ConditionFalse, fmt.Sprintf("condition %s", st)
		})
	})
	err = patchStatus(ctx, asA, b, fmt.Sprintf(`{"status":{"conditions":[{"type":%q,"status":"True","message":"x"}]}}`, batonv1.ConditionSteppedAside))
	expectPolicyDenial(t, "pod a's token setting pod b's stepped-aside condition", err, "this token is bound to pod a, not to pod b")
	// ... and it cannot read another pod that way.
	_, err = podWatch(t, asA, b).Read(ctx)
	expectPolicyDenial(t, "pod a's token reading pod b through a status patch", err, "this token is bound to pod a, not to pod b")

	// ... but not another pod's, even with the same service account.
	err = newGate(t, asA, b, batonv1.TrafficReadinessGate).Apply(ctx, held)
	expectPolicyDenial(t, "pod a's token setting pod b's condition", err, "this token is bound to pod a, not to pod b")
	expectNotHeld(t, f, b)

	// Nothing but the baton.dev/lock-held and baton.dev/stepped-aside conditions of its own pod's
	// status.
	for _, tc := range []struct{ name, patch string }{
		{"another condition", `{"status":{"conditions":[{"type":"Ready","status":"True"}]}}`},
		{"another status field", `{"status":{"message":"hello"}}`},
		{"a label through pods/status", `{"metadata":{"labels":{"baton.dev/role":"holder"}}}`},
		{"an annotation through pods/status", `{"metadata":{"annotations":{"note":"x"}}}`},
	} {
		err := patchStatus(ctx, asA, a, tc.patch)
		expectPolicyDenial(t, "pod a's token changing "+tc.name+" of pod a", err, "may change only the conditions baton.dev/lock-held and baton.dev/stepped-aside")
	}

	// Under ReadinessGate the Role has no patch on pods: RBAC refuses label changes.
	err = newGate(t, asA, a, batonv1.TrafficLabel).Apply(ctx, held)
	expectRBACDenial(t, "pod a's token setting its label under ReadinessGate", err)

	// The Label traffic policy: the sidecar may set its own pod's baton.dev/role label.
	dl.Spec.TrafficPolicy = batonv1.TrafficLabel
	if err := f.c.Update(ctx, dl); err != nil {
		t.Fatal(err)
	}
	expectAccess(t, f, labelRole, "worker")
	labelGateA := newGate(t, asA, a, batonv1.TrafficLabel)
	eventually(t, "pod a's sidecar sets its role label (once RBAC has the new rule)", func(ctx context.Context) (bool, string) {
		err := labelGateA.Apply(ctx, held)
		return err == nil, fmt.Sprintf("apply: %v", err)
	})
	expectLabel(t, f, a, "holder")
	if err := labelGateA.Apply(ctx, standby); err != nil {
		t.Fatalf("sidecar of pod a setting its own label to standby: %v", err)
	}
	expectLabel(t, f, a, "standby")

	// ... not another pod's label ...
	err = newGate(t, asA, b, batonv1.TrafficLabel).Apply(ctx, held)
	expectPolicyDenial(t, "pod a's token setting pod b's label", err, "this token is bound to pod a, not to pod b")

	// ... and nothing else of its own pod.
	for _, tc := range []struct{ name, patch string }{
		{"another label", `{"metadata":{"labels":{"app":"evil"}}}`},
		{"removing a label", `{"metadata":{"labels":{"app":null}}}`},
		{"an annotation", `{"metadata":{"annotations":{"note":"x"}}}`},
		{"the spec", `{"spec":{"activeDeadlineSeconds":5}}`},
	} {
		err := patchPod(ctx, asA, a, tc.patch)
		expectPolicyDenial(t, "pod a's token changing "+tc.name+" of pod a", err, "may change only the label baton.dev/role")
	}

	// A token of the same service account bound to no pod may change no pod.
	unbound := tokenClient(t, f, token(t, f, "worker", nil))
	err = patchStatus(ctx, unbound, a, conditionPatch("True", "Unbound"))
	expectPolicyDenial(t, "an unbound token of a sidecar's service account", err, "this token is bound to no pod")

	// A service account the RoleBinding does not name is left to RBAC: refused by RBAC without a
	// grant, and not narrowed by the policy with one (here: on a pod other than its own).
	asC := tokenClient(t, f, token(t, f, "bystander", c))
	err = patchStatus(ctx, asC, c, conditionPatch("True", "Bystander"))
	expectRBACDenial(t, "a pod-bound token of a service account that is not a subject", err)
	create(t, f.c,
		&rbacv1.Role{
			ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "bystander-status"},
			Rules:      []rbacv1.PolicyRule{statusRule},
		},
		&rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "bystander-status"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "bystander-status"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: f.ns, Name: "bystander"}},
		})
	eventually(t, "a non-subject with its own grant patches another pod's status", func(ctx context.Context) (bool, string) {
		err := patchStatus(ctx, asC, a, `{"status":{"message":"set by bystander"}}`)
		return err == nil, fmt.Sprintf("patch: %v", err)
	})

	// Users and controllers are not affected: the admin changes pod b's labels freely.
	if err := patchPod(ctx, f.cs, b, `{"metadata":{"labels":{"app":"changed"}}}`); err != nil {
		t.Errorf("admin changing a label of pod b: %v", err)
	}
}

// runLikeKubelet writes the status a kubelet would write for a running pod.
func runLikeKubelet(t *testing.T, f fixture, pod *corev1.Pod) {
	t.Helper()
	now := metav1.Now()
	pod.Status = corev1.PodStatus{
		Phase: corev1.PodRunning,
		Conditions: []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: "ReadinessGatesNotReady", LastTransitionTime: now},
		},
		PodIP:     "10.0.0.7",
		PodIPs:    []corev1.PodIP{{IP: "10.0.0.7"}},
		StartTime: &now,
		ContainerStatuses: []corev1.ContainerStatus{{
			Name: "app", Image: "registry.example/app:1", ImageID: "registry.example/app@sha256:0123", Ready: true,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
		}},
	}
	if err := f.c.Status().Update(context.Background(), pod); err != nil {
		t.Fatalf("status of pod %s: %v", pod.Name, err)
	}
}

// token returns a token of service account sa from the TokenRequest API, bound to pod when given
// (as the kubelet's projected token is).
func token(t *testing.T, f fixture, sa string, pod *corev1.Pod) string {
	t.Helper()
	var spec authenticationv1.TokenRequestSpec
	if pod != nil {
		spec.BoundObjectRef = &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}
	}
	tr, err := f.cs.CoreV1().ServiceAccounts(f.ns).CreateToken(context.Background(), sa, &authenticationv1.TokenRequest{Spec: spec}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token request for %s: %v", sa, err)
	}
	return tr.Status.Token
}

// tokenClient is a clientset authenticating with bearerToken only (no client certificate).
func tokenClient(t *testing.T, f fixture, bearerToken string) kubernetes.Interface {
	t.Helper()
	cs, err := kubernetes.NewForConfig(&rest.Config{
		Host:            f.admin.Host,
		APIPath:         f.admin.APIPath,
		BearerToken:     bearerToken,
		TLSClientConfig: rest.TLSClientConfig{CAData: f.admin.CAData, ServerName: f.admin.ServerName},
	})
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// newGate is the sidecar's gate for pod, writing with cs.
func newGate(t *testing.T, cs kubernetes.Interface, pod *corev1.Pod, policy batonv1.TrafficPolicy) *sidecar.Gate {
	t.Helper()
	opts, err := sidecar.ParseOptions([]string{
		"--locks=job", "--cassandra-hosts=127.0.0.1", "--traffic-policy=" + string(policy),
		"--pod-namespace=" + pod.Namespace, "--pod-name=" + pod.Name, "--pod-uid=" + string(pod.UID),
	}, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	h, err := sidecar.NewHolder(opts, memstore.New().Client(1, memstore.Faults{}), logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	return sidecar.NewGate(cs, opts, h, logr.Discard())
}

// podWatch is the sidecar's reader of its pod, reading pod with cs.
func podWatch(t *testing.T, cs kubernetes.Interface, pod *corev1.Pod) *sidecar.PodWatch {
	t.Helper()
	opts, err := sidecar.ParseOptions([]string{
		"--locks=job", "--cassandra-hosts=127.0.0.1", "--yield-when-unready=10s",
		"--pod-namespace=" + pod.Namespace, "--pod-name=" + pod.Name, "--pod-uid=" + string(pod.UID),
	}, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	return sidecar.NewPodWatch(cs, opts, nil, logr.Discard())
}

// stepsAside is a PodReader that steps aside for any mark at once.
type stepsAside struct{}

func (stepsAside) PodReading(sidecar.PodReading)             {}
func (stepsAside) SteppedAside(context.Context, string) bool { return true }

// stepAsideWatch runs the sidecar's PodWatch with handoff NewestRevision on pod, with cs, during
// during.
func stepAsideWatch(t *testing.T, cs kubernetes.Interface, pod *corev1.Pod, during func()) {
	t.Helper()
	opts, err := sidecar.ParseOptions([]string{
		"--locks=job", "--cassandra-hosts=127.0.0.1", "--handoff=NewestRevision", "--traffic-policy=None",
		"--pod-namespace=" + pod.Namespace, "--pod-name=" + pod.Name, "--pod-uid=" + string(pod.UID),
	}, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { sidecar.NewPodWatch(cs, opts, stepsAside{}, logr.Discard()).Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	during()
}

// setAnnotation sets (or, with value "", removes) an annotation of pod as an admin.
func setAnnotation(t *testing.T, f fixture, pod *corev1.Pod, key, value string) {
	t.Helper()
	var v any
	if value != "" {
		v = value
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{key: v}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := patchPod(context.Background(), f.cs, pod, string(patch)); err != nil {
		t.Fatal(err)
	}
}

// steppedAsideCondition is the status of pod's condition baton.dev/stepped-aside ("" without one).
func steppedAsideCondition(pod *corev1.Pod) corev1.ConditionStatus {
	for _, c := range pod.Status.Conditions {
		if c.Type == batonv1.ConditionSteppedAside {
			return c.Status
		}
	}
	return ""
}

func getPod(t *testing.T, f fixture, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	got, err := f.cs.CoreV1().Pods(pod.Namespace).Get(context.Background(), pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// conditionPatch is a strategic-merge patch of the baton.dev/lock-held condition.
func conditionPatch(status, reason string) string {
	return fmt.Sprintf(`{"status":{"conditions":[{"type":%q,"status":%q,"reason":%q}]}}`, batonv1.ConditionLockHeld, status, reason)
}

func patchStatus(ctx context.Context, cs kubernetes.Interface, pod *corev1.Pod, patch string) error {
	_, err := cs.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "status")
	return err
}

func patchPod(ctx context.Context, cs kubernetes.Interface, pod *corev1.Pod, patch string) error {
	_, err := cs.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	return err
}

// expectPolicyDenial checks that err is the policy's Forbidden with a message containing want.
func expectPolicyDenial(t *testing.T, what string, err error, want string) {
	t.Helper()
	switch {
	case err == nil:
		t.Errorf("%s: allowed, want denied by the policy", what)
	case !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), policyDenial):
		t.Errorf("%s: %v, want Forbidden by the policy", what, err)
	case !strings.Contains(err.Error(), want):
		t.Errorf("%s: message %q does not say %q", what, err.Error(), want)
	default:
		t.Logf("%s: denied: %v", what, err)
	}
}

// expectRBACDenial checks that err is a Forbidden from RBAC, not from the policy.
func expectRBACDenial(t *testing.T, what string, err error) {
	t.Helper()
	if err == nil || !apierrors.IsForbidden(err) || strings.Contains(err.Error(), policyDenial) {
		t.Errorf("%s: %v, want Forbidden by RBAC", what, err)
		return
	}
	t.Logf("%s: denied: %v", what, err)
}

func expectCondition(t *testing.T, f fixture, pod *corev1.Pod, status corev1.ConditionStatus) {
	t.Helper()
	got, err := f.cs.CoreV1().Pods(pod.Namespace).Get(context.Background(), pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range got.Status.Conditions {
		if c.Type == batonv1.ConditionLockHeld {
			if c.Status != status {
				t.Errorf("pod %s: condition %s is %s, want %s", pod.Name, c.Type, c.Status, status)
			}
			return
		}
	}
	t.Errorf("pod %s: no condition %s, want %s (conditions: %v)", pod.Name, batonv1.ConditionLockHeld, status, got.Status.Conditions)
}

// expectNotHeld checks that pod's baton.dev/lock-held condition is absent or not True.
func expectNotHeld(t *testing.T, f fixture, pod *corev1.Pod) {
	t.Helper()
	got, err := f.cs.CoreV1().Pods(pod.Namespace).Get(context.Background(), pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range got.Status.Conditions {
		if c.Type == batonv1.ConditionLockHeld && c.Status == corev1.ConditionTrue {
			t.Errorf("pod %s: condition %s is True, set by another pod's token", pod.Name, c.Type)
		}
	}
}

func expectLabel(t *testing.T, f fixture, pod *corev1.Pod, role string) {
	t.Helper()
	got, err := f.cs.CoreV1().Pods(pod.Namespace).Get(context.Background(), pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Labels[batonv1.LabelRole] != role {
		t.Errorf("pod %s: label %s=%q, want %q", pod.Name, batonv1.LabelRole, got.Labels[batonv1.LabelRole], role)
	}
}
