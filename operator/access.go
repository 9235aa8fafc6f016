package operator

import (
	"fmt"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/baton-dev/baton/controllers/sidecaraccess"
)

// setupAccess registers the reconciler of the per-namespace sidecar Role and RoleBinding.
func setupAccess(mgr ctrl.Manager, log logr.Logger) error {
	r := &sidecaraccess.Reconciler{Client: mgr.GetClient(), Log: log.WithName(sidecaraccess.ControllerName)}
	if err := r.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("operator: %w", err)
	}
	return nil
}
