package controllers_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/baton-dev/baton/internal/testing/testenv"
)

// kube is a real kube-apiserver with the DistributedLock CRD, for the reconciler tests that need
// the API server's own behaviour (status subresource, JSON patch tests, validation).
var kube = testenv.NewKubeWithCRDs(filepath.Join("..", "config", "crd", "bases"))

func TestMain(m *testing.M) {
	// The tests call Reconcile directly, without a controller to put a logger in the context, so
	// the reconciler logs through controller-runtime's global logger, which they discard.
	ctrl.SetLogger(logr.Discard())
	code := m.Run()
	kube.Stop()
	os.Exit(code)
}
