package testenv

import (
	"path/filepath"
	"testing"

	"k8s.io/client-go/rest"

	"github.com/baton-dev/baton/internal/testing/localkube"
)

// WriteKubeconfig writes cfg as a kubeconfig file in a test temporary directory, for processes
// (sidecars, kubectl) that talk to the test API server.
func WriteKubeconfig(t testing.TB, cfg *rest.Config) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := localkube.WriteKubeconfig(cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}
