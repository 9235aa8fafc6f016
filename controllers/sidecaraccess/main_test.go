package sidecaraccess_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	batonv1 "github.com/baton-dev/baton/api/v1"
	"github.com/baton-dev/baton/controllers/sidecaraccess"
	"github.com/baton-dev/baton/internal/inject"
	"github.com/baton-dev/baton/internal/operator"
	"github.com/baton-dev/baton/internal/testing/manifests"
	"github.com/baton-dev/baton/internal/testing/testenv"
)

var kube = testenv.NewKubeWithCRDs("../../config/crd/bases")

// Files the tests install: the operator's generated ClusterRole (make manifests), the sidecars'
// ClusterRoles it binds and the policy.
const (
	operatorRoleFile = "../../config/rbac/role.yaml"
	sidecarRoleFile  = "../../config/sidecar/clusterroles.yaml"
	policyFile       = "../../config/policy/sidecar-own-pod.yaml"
	// The operator's own policy: installed for TestPolicyTypeChecks only, it applies to no request
	// here (its parameter, the ClusterRoleBinding baton-operator, does not exist).
	operatorPolicyFile = "../../config/policy/operator-scope.yaml"
)

// The test's manager runs as this service account, bound to the ClusterRole generated from the
// +kubebuilder:rbac markers: the tests fail when the markers miss a permission, including the bind
// RBAC's escalation check demands for binding the sidecars' ClusterRoles.
const (
	operatorNamespace = "baton-system"
	operatorAccount   = "baton-operator"
	operatorUser      = "system:serviceaccount:" + operatorNamespace + ":" + operatorAccount
)

// pollTimeout bounds every wait for the controller or the API server.
const pollTimeout = time.Minute

func TestMain(m *testing.M) {
	code := m.Run()
	env.stop()
	kube.Stop()
	os.Exit(code)
}

// environment is the API server set up for the tests (operator RBAC, the policy) and the manager
// running the Reconciler, started once per test binary on first use.
type environment struct {
	once   sync.Once
	err    error
	admin  *rest.Config
	scheme *runtime.Scheme
	c      client.WithWatch // admin, uncached
	cs     kubernetes.Interface
	cancel context.CancelFunc
	done   chan error
}

var env environment

// fixture is what a test gets: admin clients and a fresh namespace.
type fixture struct {
	admin *rest.Config
	c     client.WithWatch
	cs    kubernetes.Interface
	ns    string
}

func setup(t *testing.T) fixture {
	t.Helper()
	cfg := kube.Config(t) // skips, or fails under CI, without a control plane
	env.once.Do(func() { env.err = env.start(cfg) })
	if env.err != nil {
		t.Fatalf("test environment: %v", env.err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "sidecaraccess-"}}
	if err := env.c.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return fixture{admin: env.admin, c: env.c, cs: env.cs, ns: ns.Name}
}

func (e *environment) start(cfg *rest.Config) error {
	ctx := context.Background()
	e.admin = cfg
	e.scheme = runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(e.scheme); err != nil {
		return err
	}
	if err := batonv1.AddToScheme(e.scheme); err != nil {
		return err
	}
	var err error
	if e.c, err = client.NewWithWatch(cfg, client.Options{Scheme: e.scheme}); err != nil {
		return err
	}
	if e.cs, err = kubernetes.NewForConfig(cfg); err != nil {
		return err
	}

	// The operator's identity: the generated ClusterRole, bound to operatorUser.
	objs, err := e.decodeFile(operatorRoleFile)
	if err != nil {
		return err
	}
	var roleName string
	for _, o := range objs {
		cr, ok := o.(*rbacv1.ClusterRole)
		if !ok {
			return fmt.Errorf("%s: unexpected %T", operatorRoleFile, o)
		}
		roleName = cr.Name
		if err := e.c.Create(ctx, cr); err != nil {
			return fmt.Errorf("installing %s: %w", operatorRoleFile, err)
		}
	}
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "baton-operator-test"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: roleName},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: operatorNamespace, Name: operatorAccount}},
	}
	if err := e.c.Create(ctx, crb); err != nil {
		return fmt.Errorf("binding the operator's ClusterRole: %w", err)
	}

	// The sidecars' ClusterRoles and the policy, as a user would apply them.
	for _, file := range []string{sidecarRoleFile, policyFile, operatorPolicyFile} {
		if objs, err = e.decodeFile(file); err != nil {
			return err
		}
		for _, o := range objs {
			if err := e.c.Create(ctx, o.(client.Object)); err != nil {
				return fmt.Errorf("installing %s: %w", file, err)
			}
		}
	}

	// The manager, with the operator's cache setup, as the operator's service account.
	opCfg := rest.CopyConfig(cfg)
	opCfg.Impersonate = rest.ImpersonationConfig{UserName: operatorUser}
	log := testLogger("sidecaraccess")
	mgr, err := ctrl.NewManager(opCfg, ctrl.Options{
		Scheme:                 e.scheme,
		Logger:                 log,
		Cache:                  operator.CacheOptions(),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	})
	if err != nil {
		return err
	}
	r := &sidecaraccess.Reconciler{Client: mgr.GetClient()}
	if err := r.SetupWithManager(mgr); err != nil {
		return err
	}
	mctx, cancel := context.WithCancel(ctx)
	e.cancel, e.done = cancel, make(chan error, 1)
	go func() { e.done <- mgr.Start(mctx) }()
	syncCtx, syncCancel := context.WithTimeout(ctx, pollTimeout)
	defer syncCancel()
	if !mgr.GetCache().WaitForCacheSync(syncCtx) {
		return errors.New("manager cache did not sync (does the operator's ClusterRole allow list and watch?)")
	}
	return nil
}

func (e *environment) stop() {
	if e.cancel == nil {
		return
	}
	e.cancel()
	if err := <-e.done; err != nil {
		fmt.Fprintf(os.Stderr, "manager: %v\n", err)
	}
}

// decodeFile decodes every YAML document of path into typed objects.
func (e *environment) decodeFile(path string) ([]runtime.Object, error) {
	return manifests.Decode(e.scheme, path)
}

// testLogger logs to stderr; the manager outlives any one test, so it cannot log to a testing.T.
func testLogger(name string) logr.Logger {
	return funcr.New(func(prefix, args string) {
		fmt.Fprintln(os.Stderr, prefix, args)
	}, funcr.Options{}).WithName(name)
}

// eventually polls cond until it reports done, failing the test after pollTimeout with the last
// state cond described.
func eventually(t *testing.T, what string, cond func(ctx context.Context) (done bool, state string)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), pollTimeout)
	defer cancel()
	last := "never polled"
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		var done bool
		done, last = cond(ctx)
		return done, nil
	})
	if err != nil {
		t.Fatalf("%s: not within %s; last: %s", what, pollTimeout, last)
	}
}

var (
	statusRule = rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods/status"}, Verbs: []string{"patch"}}
	podsRule   = rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"patch"}}
	ownLabels  = map[string]string{"app.kubernetes.io/managed-by": "baton-operator", "app.kubernetes.io/name": "baton"}
)

// The sidecars' ClusterRoles.
const (
	statusRole = "baton-sidecar"
	labelRole  = "baton-sidecar-label"
)

// expectAccess waits until namespace ns has the RoleBinding baton-sidecar of the ClusterRole
// clusterRole to exactly the subjects (service account names) given.
func expectAccess(t *testing.T, f fixture, clusterRole string, accounts ...string) {
	t.Helper()
	var subjects []rbacv1.Subject
	for _, a := range accounts {
		subjects = append(subjects, rbacv1.Subject{Kind: "ServiceAccount", Namespace: f.ns, Name: a})
	}
	wantRef := rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: clusterRole}
	eventually(t, fmt.Sprintf("RoleBinding of %s to %v", clusterRole, accounts), func(ctx context.Context) (bool, string) {
		var rb rbacv1.RoleBinding
		if err := f.c.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: "baton-sidecar"}, &rb); err != nil {
			return false, "RoleBinding: " + err.Error()
		}
		state := fmt.Sprintf("RoleBinding labels %v roleRef %v subjects %v", rb.Labels, rb.RoleRef, rb.Subjects)
		ok := rb.RoleRef == wantRef && equality.Semantic.DeepEqual(rb.Subjects, subjects) && hasLabels(rb.Labels, ownLabels)
		return ok, state
	})
}

// expectNoAccess waits until namespace ns has no RoleBinding baton-sidecar.
func expectNoAccess(t *testing.T, f fixture) {
	t.Helper()
	eventually(t, "RoleBinding deleted", func(ctx context.Context) (bool, string) {
		err := f.c.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: "baton-sidecar"}, &rbacv1.RoleBinding{})
		return apierrors.IsNotFound(err), fmt.Sprintf("get RoleBinding: %v", err)
	})
}

func hasLabels(have, want map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}

// newLock is a DistributedLock with one lock ID.
func newLock(ns, name string, traffic batonv1.TrafficPolicy) *batonv1.DistributedLock {
	return &batonv1.DistributedLock{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       batonv1.DistributedLockSpec{LockIDs: []string{"job"}, TrafficPolicy: traffic},
	}
}

// newPod is a pod running as service account sa; an injected one carries what the webhook leaves:
// the label and the annotation baton.dev/injected, and the sidecar container.
func newPod(ns, name, sa, lock string, injected bool) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": "worker"}},
		Spec: corev1.PodSpec{
			ServiceAccountName: sa,
			Containers:         []corev1.Container{{Name: "app", Image: "registry.example/app:1"}},
		},
	}
	if injected {
		p.Labels[batonv1.LabelInjected] = "true"
		p.Annotations = map[string]string{batonv1.AnnotationLock: lock, batonv1.AnnotationInjected: sidecarImage}
		p.Spec.InitContainers = []corev1.Container{{Name: inject.ContainerName, Image: sidecarImage,
			RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways)}}
	}
	return p
}

// sidecarImage is the sidecar image of the injected pods of the tests.
const sidecarImage = "ghcr.io/baton-dev/baton:test"

func create(t *testing.T, c client.Client, objs ...client.Object) {
	t.Helper()
	for _, o := range objs {
		if err := c.Create(context.Background(), o); err != nil {
			t.Fatalf("create %T %s: %v", o, o.GetName(), err)
		}
	}
}

func remove(t *testing.T, c client.Client, objs ...client.Object) {
	t.Helper()
	for _, o := range objs {
		if err := c.Delete(context.Background(), o, client.GracePeriodSeconds(0)); err != nil && !apierrors.IsNotFound(err) {
			t.Fatalf("delete %T %s: %v", o, o.GetName(), err)
		}
	}
}
