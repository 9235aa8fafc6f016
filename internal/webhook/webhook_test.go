package webhook_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	crwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	batonv1 "github.com/baton-dev/baton/api/v1"
	"github.com/baton-dev/baton/internal/inject"
	"github.com/baton-dev/baton/internal/sidecarcontract"
	"github.com/baton-dev/baton/internal/testing/testenv"
	"github.com/baton-dev/baton/internal/webhook"
)

var (
	kube = testenv.NewKubeWithCRDs("../../config/crd/bases")
	// serverLog is controller-runtime's log (the webhook server's), shown when the binary fails.
	serverLog = &testenv.SyncBuffer{}
)

func TestMain(m *testing.M) {
	// controller-runtime's package-level logger, used by the webhook server. Unset, it prints a
	// warning with a stack trace once the binary runs longer than 30 s, as the benchmarks do.
	ctrllog.SetLogger(funcr.New(func(prefix, args string) { fmt.Fprintln(serverLog, prefix, args) }, funcr.Options{}))
	code := m.Run()
	srv.stop()
	kube.Stop()
	if code != 0 {
		fmt.Fprintf(os.Stderr, "webhook server log:\n%s\n", serverLog.String())
	}
	os.Exit(code)
}

// testConfig is the operator configuration of the tests: native sidecars, a default store, and
// scope Global allowed only in the samples' namespace (TestSamplesAreAdmitted).
func testConfig() inject.Config {
	return inject.Config{
		Image:            "ghcr.io/baton-dev/baton:test",
		Cassandra:        batonv1.CassandraConnection{ContactPoints: []string{"cassandra.baton-system:9042"}},
		NativeSidecars:   true,
		GlobalNamespaces: []string{samplesNamespace},
	}
}

// calls records the pods the webhook was asked about, as "namespace/name".
type calls struct {
	mu   sync.Mutex
	seen map[string]int
}

func (c *calls) add(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seen == nil {
		c.seen = map[string]int{}
	}
	c.seen[key]++
}

func (c *calls) count(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.seen[key]
}

// countingHandler counts every request before passing it on.
type countingHandler struct {
	calls *calls
	next  admission.Handler
}

func (h countingHandler) Handle(ctx context.Context, req admission.Request) admission.Response {
	h.calls.add(req.Namespace + "/" + req.Name)
	return h.next.Handle(ctx, req)
}

// server is the webhook server of the test binary and the configuration pointing the API server
// at it, started once, on first use.
type server struct {
	once   sync.Once
	err    error
	c      client.Client
	cs     kubernetes.Interface
	calls  *calls
	cancel context.CancelFunc
	done   chan struct{}
	opts   envtest.WebhookInstallOptions
}

var srv server

const configName = "baton-test-injector"

func (s *server) stop() {
	if s.cancel == nil {
		return
	}
	s.cancel()
	<-s.done
	_ = s.opts.Cleanup()
}

// setup returns a client that knows batonv1, a clientset, the call log and a fresh namespace.
func setup(t testing.TB) (client.Client, kubernetes.Interface, *calls, string) {
	t.Helper()
	cfg := kube.Config(t) // skips, or fails under CI, without a control plane
	srv.once.Do(func() { srv.err = srv.start(cfg) })
	if srv.err != nil {
		t.Fatalf("webhook server: %v", srv.err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "webhook-"}}
	if err := srv.c.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return srv.c, srv.cs, srv.calls, ns.Name
}

func (s *server) start(cfg *rest.Config) error {
	// No client-side rate limit (client-go's default is 5 requests/s): the webhook reads a
	// DistributedLock per admission and BenchmarkAdmission creates pods back to back.
	cfg.QPS = -1
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := batonv1.AddToScheme(scheme); err != nil {
		return err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	s.c, s.cs, s.calls = c, cs, &calls{}

	// A serving certificate for localhost and a free port, from envtest.
	if err := s.opts.PrepWithoutInstalling(); err != nil {
		return fmt.Errorf("prepare serving certificate: %w", err)
	}
	injector, err := webhook.NewPodInjector(c, testConfig())
	if err != nil {
		return err
	}
	ws := crwebhook.NewServer(crwebhook.Options{
		Host:    s.opts.LocalServingHost,
		Port:    s.opts.LocalServingPort,
		CertDir: s.opts.LocalServingCertDir,
	})
	ws.Register(webhook.Path, &crwebhook.Admission{Handler: countingHandler{calls: s.calls, next: injector}})
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel, s.done = cancel, make(chan struct{})
	go func() {
		defer close(s.done)
		if err := ws.Start(ctx); err != nil {
			fmt.Fprintf(os.Stderr, "webhook server: %v\n", err)
		}
	}()

	url := "https://" + net.JoinHostPort(s.opts.LocalServingHost, strconv.Itoa(s.opts.LocalServingPort)) + webhook.Path
	mwc := webhook.MutatingWebhookConfigurationForURL(configName, url, s.opts.LocalServingCAData)
	if err := c.Create(ctx, mwc); err != nil {
		return fmt.Errorf("install MutatingWebhookConfiguration: %w", err)
	}
	return s.waitActive(ctx)
}

// waitActive waits until the API server calls the webhook: it dry-runs the creation of an
// annotated pod referencing a missing lock until the webhook rejects it.
func (s *server) waitActive(ctx context.Context) error {
	probe := annotatedPod("webhook-probe", "no-such-lock")
	deadline := time.Now().Add(time.Minute)
	var last error
	for time.Now().Before(deadline) {
		_, err := s.cs.CoreV1().Pods("default").Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil && strings.Contains(err.Error(), "default/no-such-lock") {
			return nil
		}
		last = err
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("webhook not called by the API server within a minute (last create: %v)", last)
}

// annotatedPod is a pod (without namespace: the API server takes it from the URL, as for pods
// created by controllers) whose annotation names lock.
func annotatedPod(name, lock string) *corev1.Pod {
	p := plainPod(name)
	p.Annotations = map[string]string{batonv1.AnnotationLock: lock}
	return p
}

func plainPod(name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}}},
	}
}

func createLock(t *testing.T, c client.Client, ns, name string, ids ...string) {
	t.Helper()
	dl := &batonv1.DistributedLock{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       batonv1.DistributedLockSpec{LockIDs: ids},
	}
	if err := c.Create(context.Background(), dl); err != nil {
		t.Fatalf("create DistributedLock: %v", err)
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func hasSidecar(p *corev1.Pod) bool {
	for _, l := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for _, c := range l {
			if c.Name == inject.ContainerName {
				return true
			}
		}
	}
	return false
}

func TestAnnotatedPodIsInjected(t *testing.T) {
	c, cs, calls, ns := setup(t)
	ctx := ctxT(t)
	createLock(t, c, ns, "orders", "orders", "payments")

	if _, err := cs.CoreV1().Pods(ns).Create(ctx, annotatedPod("worker-0", "orders"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod: %v", err)
	}
	if n := calls.count(ns + "/worker-0"); n != 1 {
		t.Errorf("webhook called %d times for the pod, want 1", n)
	}
	got, err := cs.CoreV1().Pods(ns).Get(ctx, "worker-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	if len(got.Spec.InitContainers) != 1 || got.Spec.InitContainers[0].Name != inject.ContainerName {
		t.Fatalf("initContainers = %+v, want the %s sidecar", got.Spec.InitContainers, inject.ContainerName)
	}
	sc := got.Spec.InitContainers[0]
	if sc.RestartPolicy == nil || *sc.RestartPolicy != corev1.ContainerRestartPolicyAlways {
		t.Errorf("sidecar restartPolicy = %v, want Always (native sidecar)", sc.RestartPolicy)
	}
	if sc.Image != testConfig().Image {
		t.Errorf("sidecar image = %q", sc.Image)
	}
	if sc.StartupProbe == nil {
		t.Errorf("Blocking mode (the default for a bare pod) but the sidecar has no startup probe")
	}
	if len(got.Spec.Containers) != 1 {
		t.Fatalf("containers = %d, want only the app", len(got.Spec.Containers))
	}
	env := map[string]string{}
	for _, e := range got.Spec.Containers[0].Env {
		env[e.Name] = e.Value
	}
	if env[sidecarcontract.EnvSocket] != sidecarcontract.SocketPath || env[sidecarcontract.EnvLocks] != "orders,payments" {
		t.Errorf("app env = %v, want %s=%s and %s=orders,payments", env, sidecarcontract.EnvSocket, sidecarcontract.SocketPath, sidecarcontract.EnvLocks)
	}
	var vol bool
	for _, v := range got.Spec.Volumes {
		vol = vol || (v.Name == inject.SocketVolume && v.EmptyDir != nil)
	}
	if !vol {
		t.Errorf("volumes = %+v, want emptyDir %s", got.Spec.Volumes, inject.SocketVolume)
	}
	var mounted bool
	for _, m := range got.Spec.Containers[0].VolumeMounts {
		mounted = mounted || (m.Name == inject.SocketVolume && m.MountPath == sidecarcontract.SocketDir)
	}
	if !mounted {
		t.Errorf("app mounts = %+v, want %s at %s", got.Spec.Containers[0].VolumeMounts, inject.SocketVolume, sidecarcontract.SocketDir)
	}
	if len(got.Spec.ReadinessGates) != 1 || got.Spec.ReadinessGates[0].ConditionType != batonv1.ConditionLockHeld {
		t.Errorf("readinessGates = %+v, want %s (ReadinessGate, the default for a bare pod)", got.Spec.ReadinessGates, batonv1.ConditionLockHeld)
	}
	if got.Annotations[batonv1.AnnotationInjected] != testConfig().Image {
		t.Errorf("annotations = %v, want %s", got.Annotations, batonv1.AnnotationInjected)
	}
}

func TestMissingLockIsRejected(t *testing.T) {
	_, cs, calls, ns := setup(t)
	ctx := ctxT(t)

	_, err := cs.CoreV1().Pods(ns).Create(ctx, annotatedPod("orphan", "ghost"), metav1.CreateOptions{})
	if err == nil {
		t.Fatal("pod referencing a missing DistributedLock was admitted")
	}
	want := inject.MissingLockError(ns, "ghost").Error()
	if !strings.Contains(err.Error(), ns+"/ghost") || !strings.Contains(err.Error(), want) {
		t.Errorf("error = %q, want it to contain %q", err, want)
	}
	if !apierrors.IsForbidden(err) {
		t.Errorf("error reason = %v, want Forbidden", apierrors.ReasonForError(err))
	}
	if n := calls.count(ns + "/orphan"); n != 1 {
		t.Errorf("webhook called %d times, want 1", n)
	}
	if _, err := cs.CoreV1().Pods(ns).Get(ctx, "orphan", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("rejected pod: get = %v, want NotFound", err)
	}
}

func TestUnannotatedPodNeverReachesWebhook(t *testing.T) {
	c, cs, calls, ns := setup(t)
	ctx := ctxT(t)
	createLock(t, c, ns, "orders", "orders")

	other := plainPod("other-annotations")
	other.Annotations = map[string]string{"example.com/owner": "team-a"}
	for _, p := range []*corev1.Pod{plainPod("no-annotations"), other} {
		if _, err := cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create %s: %v", p.Name, err)
		}
		got, err := cs.CoreV1().Pods(ns).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if hasSidecar(got) || len(got.Spec.Volumes) != 0 || len(got.Spec.ReadinessGates) != 0 || len(got.Spec.Containers[0].Env) != 0 {
			t.Errorf("%s was changed: %+v", p.Name, got.Spec)
		}
		if n := calls.count(ns + "/" + p.Name); n != 0 {
			t.Errorf("%s: webhook called %d times, want 0 (matchConditions should keep it away)", p.Name, n)
		}
	}
	// The counter works: an annotated pod in the same namespace does reach the webhook.
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, annotatedPod("control", "orders"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if n := calls.count(ns + "/control"); n != 1 {
		t.Errorf("control pod: webhook called %d times, want 1", n)
	}
}

func TestOptedOutPodIsAdmittedUnchanged(t *testing.T) {
	_, cs, calls, ns := setup(t)
	ctx := ctxT(t)

	// The lock does not exist: an opted-out pod is admitted without looking it up.
	p := annotatedPod("opted-out", "ghost")
	p.Annotations[batonv1.AnnotationInject] = "false"
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create opted-out pod: %v", err)
	}
	got, err := cs.CoreV1().Pods(ns).Get(ctx, p.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if hasSidecar(got) || len(got.Spec.ReadinessGates) != 0 {
		t.Errorf("opted-out pod was injected: %+v", got.Spec)
	}
	if _, ok := got.Annotations[batonv1.AnnotationInjected]; ok {
		t.Errorf("opted-out pod has %s", batonv1.AnnotationInjected)
	}
	if n := calls.count(ns + "/" + p.Name); n != 1 {
		t.Errorf("webhook called %d times, want 1 (the annotation is present)", n)
	}
}

// The API server accepts the in-cluster (Service) variant of the configuration.
func TestServiceConfigurationIsAccepted(t *testing.T) {
	c, _, _, _ := setup(t)
	mwc := webhook.MutatingWebhookConfiguration("baton-injector", "baton-system", "baton-webhook", webhook.Path, []byte("not-a-real-ca"))
	if err := c.Create(ctxT(t), mwc, client.DryRunAll); err != nil {
		t.Fatalf("dry-run create: %v", err)
	}
}

// TestForgedInjectionIsDenied: baton's injection markers (the annotation and label
// baton.dev/injected, and the sidecar container) come only from the webhook's own mutation. A pod
// whose author sets them is denied when it is created, and they cannot be added to a pod later:
// otherwise the pod skips every check of the webhook (the Global allow-list among them) and the
// operator grants its service account the sidecar's permissions.
func TestForgedInjectionIsDenied(t *testing.T) {
	c, cs, _, ns := setup(t)
	ctx := ctxT(t)
	createLock(t, c, ns, "orders", "orders")
	global := &batonv1.DistributedLock{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "everywhere"},
		Spec:       batonv1.DistributedLockSpec{LockIDs: []string{"orders"}, Scope: batonv1.ScopeGlobal},
	}
	if err := c.Create(ctx, global); err != nil {
		t.Fatal(err)
	}

	forged := map[string]*corev1.Pod{}
	p := annotatedPod("injected-annotation", "everywhere") // Global is not allowed in this namespace
	p.Annotations[batonv1.AnnotationInjected] = testConfig().Image
	forged[p.Name] = p
	p = plainPod("injected-label") // no baton.dev/lock: it never reached the webhook
	p.Labels = map[string]string{batonv1.LabelInjected: "true"}
	forged[p.Name] = p
	p = plainPod("injected-annotation-only")
	p.Annotations = map[string]string{batonv1.AnnotationInjected: "x"}
	forged[p.Name] = p
	p = annotatedPod("own-sidecar", "orders")
	p.Spec.InitContainers = []corev1.Container{{Name: inject.ContainerName, Image: testConfig().Image,
		RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways),
		Env:           []corev1.EnvVar{{Name: "BATON_SCOPE", Value: "Global"}}}}
	forged[p.Name] = p
	for name, p := range forged {
		_, err := cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		if err == nil {
			got, _ := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			t.Errorf("%s: admitted with labels %v, annotations %v", name, got.Labels, got.Annotations)
			continue
		}
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "baton") {
			t.Errorf("%s: err = %v, want a denial by baton's webhook", name, err)
		}
	}

	// A pod admitted without the markers cannot be given them afterwards.
	plain, err := cs.CoreV1().Pods(ns).Create(ctx, plainPod("plain"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, patch := range []string{
		`{"metadata":{"labels":{"baton.dev/injected":"true"}}}`,
		`{"metadata":{"annotations":{"baton.dev/injected":"x"}}}`,
	} {
		_, err := cs.CoreV1().Pods(ns).Patch(ctx, plain.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		if err == nil {
			t.Errorf("patch %s of a pod that was not injected: admitted", patch)
		} else if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "baton") {
			t.Errorf("patch %s: err = %v, want a denial by baton's webhook", patch, err)
		}
	}

	// Nor through a subresource: pods/status takes metadata changes too, the others should not.
	markPatch := []byte(`{"metadata":{"labels":{"baton.dev/injected":"true"},"annotations":{"baton.dev/injected":"x"}}}`)
	for _, sub := range []string{"status", "ephemeralcontainers", "resize"} {
		_, patchErr := cs.CoreV1().Pods(ns).Patch(ctx, plain.Name, types.StrategicMergePatchType, markPatch, metav1.PatchOptions{}, sub)
		if got, err := cs.CoreV1().Pods(ns).Get(ctx, plain.Name, metav1.GetOptions{}); err != nil {
			t.Fatal(err)
		} else if got.Labels[batonv1.LabelInjected] != "" || got.Annotations[batonv1.AnnotationInjected] != "" {
			t.Errorf("markers set through pods/%s (patch: %v): labels %v annotations %v", sub, patchErr, got.Labels, got.Annotations)
		}
	}

	// A really injected pod keeps its markers and accepts other changes (the sidecar's role
	// label among them) without a call to the webhook.
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, annotatedPod("real", "orders"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create an annotated pod: %v", err)
	}
	got, err := cs.CoreV1().Pods(ns).Get(ctx, "real", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Labels[batonv1.LabelInjected] != "true" || got.Annotations[batonv1.AnnotationInjected] == "" || !hasSidecar(got) {
		t.Fatalf("the webhook did not inject: labels %v annotations %v", got.Labels, got.Annotations)
	}
	for _, patch := range []string{
		`{"metadata":{"labels":{"baton.dev/role":"holder"}}}`,
		`{"metadata":{"labels":{"baton.dev/injected":"false"}}}`,
		`{"metadata":{"annotations":{"baton.dev/injected":"other-image"}}}`,
	} {
		_, err := cs.CoreV1().Pods(ns).Patch(ctx, "real", types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		wantDenied := strings.Contains(patch, "injected")
		if wantDenied && (err == nil || !apierrors.IsForbidden(err)) {
			t.Errorf("patch %s of an injected pod: err = %v, want a denial", patch, err)
		}
		if !wantDenied && err != nil {
			t.Errorf("patch %s of an injected pod: %v", patch, err)
		}
	}
}

// kubectl runs the real kubectl with args against the test API server and returns what it printed
// (stdout and stderr together).
func kubectl(t *testing.T, args ...string) (string, error) {
	t.Helper()
	bin := testenv.Kubectl(t) // fails under CI, skips elsewhere, when kubectl cannot be built
	kubeconfig := testenv.WriteKubeconfig(t, kube.Config(t))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, append([]string{"--kubeconfig", kubeconfig}, args...)...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("kubectl %s: %w", strings.Join(args, " "), err)
	}
	return string(out), nil
}
