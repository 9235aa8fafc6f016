package sidecarcontract

import (
	"strings"

	batonv1 "github.com/baton-dev/baton/api/v1"
)

// globalPrefix prefixes Global lock IDs in the lock store; Kubernetes namespaces cannot start
// with "_", so they never collide with namespaced keys.
const globalPrefix = "_global/"

// StoreLockID returns the key of lock ID id in the lock store: "<namespace>/<id>" in the
// Namespace scope, "_global/<id>" in the Global scope. The sidecar and the operator must agree on
// it, so both use this function.
func StoreLockID(scope batonv1.LockScope, namespace, id string) string {
	if scope == batonv1.ScopeGlobal {
		return globalPrefix + id
	}
	return namespace + "/" + id
}

// OwnerIdentity is the lock-owner identity of a pod: "<namespace>/<name>/<uid>". The lock package
// appends a random incarnation per sidecar start ("...#<incarnation>").
func OwnerIdentity(namespace, name, uid string) string {
	return namespace + "/" + name + "/" + uid
}

// PodOfOwner returns the namespace and name of the pod in a lock owner string written by a
// sidecar ("<namespace>/<name>/<uid>#<incarnation>"). Owners of other shapes (for example the
// baton CLI's "host/<hostname>/<pid>/<random>#...") come back with their identity as the name.
func PodOfOwner(owner string) (namespace, name string) {
	identity := owner
	if i := strings.LastIndex(owner, "#"); i >= 0 {
		identity = owner[:i]
	}
	parts := strings.Split(identity, "/")
	if len(parts) != 3 {
		return "", identity
	}
	return parts[0], parts[1]
}
