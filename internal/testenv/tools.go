package testenv

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/localkube"
)

// Kubectl returns the path of the real kubectl (localkube.KubernetesVersion, built from Go modules
// on first use). It fails the test under CI when kubectl cannot be built, and skips it elsewhere.
func Kubectl(t testing.TB) string {
	t.Helper()
	return buildTool(t, "kubectl", localkube.Kubectl)
}

// Helm returns the path of the real helm (localkube.HelmVersion, built from Go modules on first
// use). It fails the test under CI when helm cannot be built, and skips it elsewhere.
func Helm(t testing.TB) string {
	t.Helper()
	return buildTool(t, "helm", localkube.Helm)
}

func buildTool(t testing.TB, name string, install func(context.Context, localkube.Config) (string, error)) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Minute)
	defer cancel()
	path, err := install(ctx, localkube.Config{Progress: os.Stderr})
	if err != nil {
		msg := fmt.Sprintf("%s could not be built: %v\nIt is built from Go modules on first use; try: go run ./hack/kube install", name, err)
		if InCI() {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return path
}
