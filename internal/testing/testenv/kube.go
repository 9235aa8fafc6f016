package testenv

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/baton-dev/baton/internal/testing/localkube"
)

// Kube is a real kube-apiserver and etcd (built from Go modules by localkube) shared by the tests
// of one binary, started on first use.
type Kube struct {
	once    sync.Once
	started atomic.Bool // a start was asked for (Config or Prestart)
	env     *envtest.Environment
	cfg     *rest.Config
	err     error
}

// NewKube describes the control plane; nothing starts until a test asks for it.
func NewKube() *Kube { return &Kube{env: &envtest.Environment{}} }

// NewKubeWithCRDs is NewKube with the CustomResourceDefinitions in the given files or directories
// installed (and established) when the control plane starts. A missing path is an error, so a
// mistyped path fails the start instead of silently testing without the CRDs.
func NewKubeWithCRDs(paths ...string) *Kube {
	return &Kube{env: &envtest.Environment{CRDDirectoryPaths: paths, ErrorIfCRDPathMissing: true}}
}

// Config returns the admin REST config, starting the control plane on first use. It fails the
// test under CI when the control plane cannot start, and skips it elsewhere. The control plane is
// serving when Config returns, so a deadline the caller starts afterwards covers only its own work.
func (k *Kube) Config(t testing.TB) *rest.Config {
	t.Helper()
	SkipShort(t, "a real kube-apiserver")
	k.started.Store(true)
	k.once.Do(func() { k.cfg, k.err = k.start() })
	if k.err != nil {
		msg := fmt.Sprintf("kube-apiserver: %v\nIt is built from Go modules; make test builds it before the tests "+
			"(make install-deps, or go run ./hack/kube install)", k.err)
		if InCI() {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return rest.CopyConfig(k.cfg)
}

// Prestart starts the control plane in the background, so that its start overlaps other set-up
// work instead of a test's own time; Config then waits for it and reports its failure. It does
// nothing under -short or when a start was asked for already.
func (k *Kube) Prestart() {
	if testing.Short() || k.started.Swap(true) {
		return
	}
	go k.once.Do(func() { k.cfg, k.err = k.start() })
}

// start builds (normally a cache hit: make test runs make install-deps first) and then starts the
// control plane, each step with a bound of its own, so that a build never eats into the start.
func (k *Kube) start() (*rest.Config, error) {
	// envtest and controller-runtime's clients log through controller-runtime's global logger.
	// Without one, their first log line 30 s or more into the binary's run prints a stack trace
	// ("log.SetLogger(...) was never called"). This is a no-op where TestMain set a logger first.
	ctrllog.SetLogger(logr.Discard())
	cfg := localkube.Config{Progress: os.Stderr}
	ictx, cancel := context.WithTimeout(context.Background(), InstallTimeout)
	defer cancel()
	if _, err := localkube.Install(ictx, cfg); err != nil {
		return nil, fmt.Errorf("not built: %w", err)
	}
	sctx, cancel := context.WithTimeout(context.Background(), kubeStartTimeout)
	defer cancel()
	restCfg, err := localkube.StartEnv(sctx, cfg, k.env)
	if err != nil {
		return nil, fmt.Errorf("did not start: %w", err)
	}
	return restCfg, nil
}

// Client returns a clientset for the control plane.
func (k *Kube) Client(t testing.TB) kubernetes.Interface {
	t.Helper()
	c, err := kubernetes.NewForConfig(k.Config(t))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Stop stops the control plane if it was started. Call it from TestMain after m.Run.
func (k *Kube) Stop() {
	if !k.started.Load() {
		return
	}
	k.once.Do(func() {}) // waits for a start in progress (Prestart)
	if k.cfg == nil {
		return
	}
	if err := k.env.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "stopping kube-apiserver: %v\n", err)
	}
}

// RuntimeClient returns a controller-runtime client for the control plane whose scheme holds the
// built-in types and those that addToScheme add (for example batonv1.AddToScheme).
func (k *Kube) RuntimeClient(t testing.TB, addToScheme ...func(*runtime.Scheme) error) client.Client {
	t.Helper()
	s := runtime.NewScheme()
	for _, add := range append([]func(*runtime.Scheme) error{clientgoscheme.AddToScheme}, addToScheme...) {
		if err := add(s); err != nil {
			t.Fatal(err)
		}
	}
	c, err := client.New(k.Config(t), client.Options{Scheme: s})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Namespace creates a namespace named prefix plus a random suffix and returns its name.
func Namespace(t testing.TB, c client.Client, prefix string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix}}
	if err := c.Create(context.Background(), ns); err != nil {
		t.Fatalf("creating a namespace %s...: %v", prefix, err)
	}
	return ns.Name
}
