package testenv

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/baton-dev/baton/internal/localkube"
)

// Kube is a real kube-apiserver and etcd (built from Go modules by localkube) shared by the tests
// of one binary, started on first use.
type Kube struct {
	once sync.Once
	env  *envtest.Environment
	cfg  *rest.Config
	err  error
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
// test under CI when the control plane cannot start, and skips it elsewhere.
func (k *Kube) Config(t testing.TB) *rest.Config {
	t.Helper()
	k.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 45*time.Minute)
		defer cancel()
		k.cfg, k.err = localkube.StartEnv(ctx, localkube.Config{Progress: os.Stderr}, k.env)
	})
	if k.err != nil {
		msg := fmt.Sprintf("kube-apiserver did not start: %v\nIt is built from Go modules on first use; try: go run ./hack/kube install", k.err)
		if InCI() {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return rest.CopyConfig(k.cfg)
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
	if k.cfg == nil {
		return
	}
	if err := k.env.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "stopping kube-apiserver: %v\n", err)
	}
}
