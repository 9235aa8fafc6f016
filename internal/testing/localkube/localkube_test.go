package localkube_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/baton-dev/baton/internal/testing/localkube"
)

// One control plane for the whole package, started by TestMain. The first
// run builds it from Go modules (several minutes; make test runs make
// install-deps first, so there it is a cache hit): that happens before
// m.Run, so go test's -timeout does not cover it; installTimeout does, and
// the start has a bound of its own.
const (
	installTimeout = 45 * time.Minute
	startTimeout   = 5 * time.Minute
)

type controlPlane struct {
	restCfg *rest.Config
	err     error
}

// cp is set once by TestMain before any test runs and only read afterwards.
var cp controlPlane

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	flag.Parse()
	if testing.Short() {
		return m.Run() // the tests that need the control plane skip themselves
	}
	cfg := localkube.Config{Progress: os.Stderr}
	ictx, icancel := context.WithTimeout(context.Background(), installTimeout)
	defer icancel()
	env := &envtest.Environment{}
	if _, cp.err = localkube.Install(ictx, cfg); cp.err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
		defer cancel()
		cp.restCfg, cp.err = localkube.StartEnv(ctx, cfg, env)
	}
	if cp.err == nil {
		defer func() {
			if err := env.Stop(); err != nil {
				fmt.Fprintf(os.Stderr, "localkube: stop envtest: %v\n", err)
			}
		}()
	}
	return m.Run()
}

// requireControlPlane returns the envtest rest.Config. If the control plane
// could not be built or started, the test fails under CI=true and is skipped
// otherwise.
func requireControlPlane(t *testing.T) *rest.Config {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: this test needs the real control plane (make test runs it)")
	}
	if cp.err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("build/start the local Kubernetes control plane: %v", cp.err)
		}
		t.Skipf("no local Kubernetes control plane (build it with `make install-deps` or `go run ./hack/kube install`; under CI=true this fails the test): %v", cp.err)
	}
	return cp.restCfg
}

func TestInstallIsCachedAndComplete(t *testing.T) {
	requireControlPlane(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	binDir, err := localkube.Install(ctx, localkube.Config{})
	if err != nil {
		t.Fatalf("Install: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("second Install took %s, want a cache hit", d)
	}
	got, ok, err := localkube.Installed(localkube.Config{})
	if err != nil || !ok || got != binDir {
		t.Errorf("Installed() = %q, %v, %v; want %q, true, nil", got, ok, err, binDir)
	}
	for _, name := range []string{localkube.KubeAPIServer, localkube.KubeControllerManager, localkube.Etcd} {
		fi, err := os.Stat(filepath.Join(binDir, name))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if fi.Mode().Perm()&0o111 == 0 {
			t.Errorf("%s is not executable (%v)", name, fi.Mode())
		}
	}
}

// TestClientTools runs the kubectl and helm that Kubectl and Helm build and
// checks that they report the versions they were built from. Under CI=true a
// failed build fails the test; elsewhere it is skipped.
func TestClientTools(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), installTimeout)
	defer cancel()
	cfg := localkube.Config{Progress: os.Stderr}
	for _, tc := range []struct {
		name    string
		install func(context.Context, localkube.Config) (string, error)
		args    []string
		want    string
	}{
		{"kubectl", localkube.Kubectl, []string{"version", "--client", "-o", "json"}, `"gitVersion": "` + localkube.KubernetesVersion + `"`},
		{"helm", localkube.Helm, []string{"version", "--template", "{{.Version}}"}, localkube.HelmVersion},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path, err := tc.install(ctx, cfg)
			if err != nil {
				if os.Getenv("CI") == "true" {
					t.Fatalf("build %s: %v", tc.name, err)
				}
				t.Skipf("%s could not be built (try `make install-deps` or `go run ./hack/kube install`; under CI=true this fails the test): %v", tc.name, err)
			}
			if binDir, _, _ := localkube.Installed(cfg); tc.name == "kubectl" && filepath.Dir(path) != binDir {
				t.Errorf("kubectl is in %s, want the control plane's %s (envtest looks there)", filepath.Dir(path), binDir)
			}
			start := time.Now()
			again, err := tc.install(ctx, cfg)
			if err != nil || again != path {
				t.Errorf("second install = %q, %v; want %q", again, err, path)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("second install took %s, want a cache hit", d)
			}
			runCtx, runCancel := context.WithTimeout(context.Background(), time.Minute) // after the build
			defer runCancel()
			out, err := exec.CommandContext(runCtx, path, tc.args...).CombinedOutput()
			if err != nil {
				t.Fatalf("%s %v: %v\n%s", tc.name, tc.args, err, out)
			}
			if !strings.Contains(string(out), tc.want) {
				t.Errorf("%s %v = %s, want it to contain %s", tc.name, tc.args, out, tc.want)
			}
		})
	}
}

func TestServerVersion(t *testing.T) {
	restCfg := requireControlPlane(t)
	dc, err := discovery.NewDiscoveryClientForConfig(restCfg)
	if err != nil {
		t.Fatal(err)
	}
	v, err := dc.ServerVersion()
	if err != nil {
		t.Fatalf("GET /version: %v", err)
	}
	t.Logf("server version: %s (major %q minor %q, %s)", v.GitVersion, v.Major, v.Minor, v.GoVersion)
	if v.GitVersion != localkube.KubernetesVersion || v.Major != "1" || v.Minor != "37" {
		t.Errorf("/version = %s (major %q, minor %q), want %s (1, 37)", v.GitVersion, v.Major, v.Minor, localkube.KubernetesVersion)
	}
}

// TestPodStatusConditionPatch does what baton's sidecar does: it sets a
// readiness-gate condition through the pods/status subresource.
func TestPodStatusConditionPatch(t *testing.T) {
	restCfg := requireControlPlane(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		t.Fatal(err)
	}
	const gate corev1.PodConditionType = "baton.dev/lock-held"

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "localkube-test"}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "worker-0", Namespace: ns.Name},
		Spec: corev1.PodSpec{
			Containers:     []corev1.Container{{Name: "app", Image: "registry.example/app:1"}},
			ReadinessGates: []corev1.PodReadinessGate{{ConditionType: gate}},
		},
	}
	created, err := cs.CoreV1().Pods(ns.Name).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod: %v", err)
	}
	if len(created.Spec.ReadinessGates) != 1 || created.Spec.ReadinessGates[0].ConditionType != gate {
		t.Fatalf("created pod readinessGates = %+v", created.Spec.ReadinessGates)
	}

	now := metav1.NewTime(time.Now().Truncate(time.Second))
	patch := fmt.Sprintf(`{"status":{"conditions":[{"type":%q,"status":"True","reason":"LockHeld","message":"fencing token 1","lastTransitionTime":%q}]}}`,
		gate, now.UTC().Format(time.RFC3339))
	patched, err := cs.CoreV1().Pods(ns.Name).Patch(ctx, pod.Name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "status")
	if err != nil {
		t.Fatalf("patch pods/status: %v", err)
	}
	if patched.ResourceVersion == created.ResourceVersion {
		t.Errorf("resourceVersion unchanged by the status patch")
	}

	got, err := cs.CoreV1().Pods(ns.Name).Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get pod: %v", err)
	}
	var cond *corev1.PodCondition
	for i := range got.Status.Conditions {
		if got.Status.Conditions[i].Type == gate {
			cond = &got.Status.Conditions[i]
		}
	}
	if cond == nil {
		t.Fatalf("condition %s missing after patch; conditions = %+v", gate, got.Status.Conditions)
	}
	if cond.Status != corev1.ConditionTrue || cond.Reason != "LockHeld" || cond.Message != "fencing token 1" || !cond.LastTransitionTime.Equal(&now) {
		t.Errorf("condition = %+v, want True/LockHeld/fencing token 1 at %s", *cond, now)
	}

	// The status subresource ignores spec changes and the main resource
	// ignores status changes.
	specPatch := `{"status":{"conditions":[{"type":"baton.dev/lock-held","status":"False"}]}}`
	viaMain, err := cs.CoreV1().Pods(ns.Name).Patch(ctx, pod.Name, types.StrategicMergePatchType, []byte(specPatch), metav1.PatchOptions{})
	if err != nil {
		t.Fatalf("patch pod (main resource): %v", err)
	}
	for _, c := range viaMain.Status.Conditions {
		if c.Type == gate && c.Status != corev1.ConditionTrue {
			t.Errorf("a status change through the main resource was applied: %+v", c)
		}
	}
}
