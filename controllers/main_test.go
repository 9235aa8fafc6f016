package controllers_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/baton-dev/baton/internal/testenv"
)

// kube is a real kube-apiserver with the DistributedLock CRD, for the reconciler tests that need
// the API server's own behaviour (status subresource, JSON patch tests, validation).
var kube = testenv.NewKubeWithCRDs(filepath.Join("..", "config", "crd", "bases"))

func TestMain(m *testing.M) {
	code := m.Run()
	kube.Stop()
	os.Exit(code)
}
