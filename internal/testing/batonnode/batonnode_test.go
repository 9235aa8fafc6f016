package batonnode_test

import (
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	batonv1 "github.com/baton-dev/baton/api/v1"
	"github.com/baton-dev/baton/controllers"
	"github.com/baton-dev/baton/internal/build/imagebuild"
	"github.com/baton-dev/baton/internal/testing/batonnode"
	"github.com/baton-dev/baton/internal/testing/images/demoapp"
)

// TestWorkloadIsTheRecommendedOne: the objects the end-to-end tests and the demo create are the
// the user guide's: the pods name the lock, the image is the imported one and is never pulled, the Service
// selects the pods, and the operator's own rollout check finds nothing wrong in any mode.
func TestWorkloadIsTheRecommendedOne(t *testing.T) {
	for _, mode := range []batonv1.LockMode{batonv1.ModeBlocking, batonv1.ModeTry} {
		w := batonnode.Workload{Namespace: "ns", Name: "report", Replicas: 3, Mode: mode, Policy: batonv1.TrafficReadinessGate, Lease: 5 * time.Second}
		dl, dep, svc := w.Objects()
		if dl.Namespace != "ns" || len(dl.Spec.LockIDs) != 1 || dl.Spec.LockIDs[0] != "report" || dl.Spec.Mode != mode ||
			dl.Spec.LeaseDuration.Duration != 5*time.Second {
			t.Errorf("DistributedLock %+v", dl)
		}
		tmpl := dep.Spec.Template
		if tmpl.Annotations[batonv1.AnnotationLock] != "report" || *dep.Spec.Replicas != 3 {
			t.Errorf("Deployment: lock annotation %q, replicas %d", tmpl.Annotations[batonv1.AnnotationLock], *dep.Spec.Replicas)
		}
		app := tmpl.Spec.Containers[0]
		if app.Image != imagebuild.DemoAppTag || app.ImagePullPolicy != corev1.PullNever || len(app.Env) != 1 ||
			app.Env[0].Name != demoapp.EnvLockID || app.Env[0].Value != "report" {
			t.Errorf("app container %+v", app)
		}
		for k, v := range svc.Spec.Selector {
			if tmpl.Labels[k] != v {
				t.Errorf("Service selects %s=%s, the pods have %v", k, v, tmpl.Labels)
			}
		}
		if problems := controllers.RolloutProblems(dl, []appsv1.Deployment{*dep}, nil); len(problems) > 0 {
			t.Errorf("mode %s: the operator reports %v", mode, problems)
		}
	}
}
