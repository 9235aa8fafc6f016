package operator

import (
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batonv1 "github.com/baton-dev/baton/api/v1"
	"github.com/baton-dev/baton/controllers/sidecaraccess"
)

// CacheOptions is the cache policy of the operator's manager, and the one place it is set. The
// cache is shared: every reconciler, and the webhook, that reads through the manager's client
// sees only what it holds, so each narrowing below is checked against all of them.
//
//   - Pods: only those labelled baton.dev/injected=true (the webhook sets the label on every pod
//     it injects; the sidecaraccess reconciler checks the rest of inject.Injected itself). The DistributedLock reconciler watches pods to refresh the status of the lock
//     a pod names: only an injected pod runs a sidecar, so only its events can change what the
//     lock store says. The sidecaraccess reconciler lists the injected pods of a namespace to bind
//     their service accounts. Neither needs any other pod, and caching every pod of a large
//     cluster would cost memory for nothing.
//   - RoleBindings: only those named baton-sidecar, the ones the sidecaraccess reconciler manages
//     (and watches, to repair drift). The field selector on the name is what lets the operator's
//     RBAC limit list and watch to that name (resourceNames).
//   - Everything else in full: DistributedLocks (both reconcilers, and the webhook), Deployments
//     and StatefulSets (the DistributedLock reconciler's RolloutSafe check).
//   - managedFields are dropped from every cached object: nothing reads them.
//
// Not cached at all: Secrets (Cassandra credentials are read through the manager's API reader, so
// the operator needs only get on them) and the webhook certificate's Secret and webhook
// configuration (the certificate rotator keeps its own cache of its namespace).
func CacheOptions() cache.Options {
	own := fields.OneTermEqualSelector("metadata.name", sidecaraccess.Name)
	return cache.Options{
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Pod{}:         {Label: labels.SelectorFromSet(labels.Set{batonv1.LabelInjected: "true"})},
			&rbacv1.RoleBinding{}: {Field: own},
		},
		DefaultTransform: cache.TransformStripManagedFields(),
	}
}
