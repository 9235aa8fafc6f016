package testenv

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/baton-dev/baton/internal/testing/localkube"
)

// Kubectl returns the path of the real kubectl (localkube.KubernetesVersion, built from Go modules
// on first use). It fails the test under CI when kubectl cannot be built, and skips it elsewhere.
// The binary exists when Kubectl returns, so a deadline the caller starts afterwards covers only
// its own work.
func Kubectl(t testing.TB) string {
	t.Helper()
	return kubectl.path(t)
}

// Helm returns the path of the real helm (localkube.HelmVersion, built from Go modules on first
// use). It fails the test under CI when helm cannot be built, and skips it elsewhere. The binary
// exists when Helm returns, so a deadline the caller starts afterwards covers only its own work.
func Helm(t testing.TB) string {
	t.Helper()
	return helm.path(t)
}

var (
	kubectl = &tool{name: "kubectl", install: localkube.Kubectl}
	helm    = &tool{name: "helm", install: localkube.Helm}
)

// tool is a client binary looked up (or built, with its own bound) once per test binary.
type tool struct {
	name    string
	install func(context.Context, localkube.Config) (string, error)

	once sync.Once
	bin  string
	err  error
}

func (tl *tool) path(t testing.TB) string {
	t.Helper()
	SkipShort(t, "the real "+tl.name)
	tl.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), InstallTimeout)
		defer cancel()
		tl.bin, tl.err = tl.install(ctx, localkube.Config{Progress: os.Stderr})
	})
	if tl.err != nil {
		msg := fmt.Sprintf("%s could not be built: %v\nIt is built from Go modules; make test builds it before the tests "+
			"(make install-deps, or go run ./hack/kube install)", tl.name, tl.err)
		if InCI() {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return tl.bin
}
