// Package v1 holds the baton.dev/v1 API: the DistributedLock custom resource that declares the
// lock IDs a workload needs and how its pods hold them, and the status the operator reports back
// from the lock store.
//
// The Go types and their kubebuilder markers are the source of truth: controller-gen turns them
// into the CRD under config/crd/bases (validation, defaults, CEL rules, printer columns) and into
// zz_generated.deepcopy.go; run "make generate manifests" after changing them.
//
// It also names every baton.dev key users see on pods (keys.go: the injection annotations and
// markers, the sidecar's readiness-gate condition and role label) and on locks and Secrets
// (AnnotationRevoke, AnnotationSuperseded, LabelCassandraSecret): the rest of baton spells them
// only through these constants.
//
// What the CRD does not check: that a Global scope is allowed in the namespace (the operator's
// allow-list), that the referenced Secrets exist, or that Cassandra is reachable. Those are
// reported at admission or in status conditions, not when the object is created.
//
// +kubebuilder:object:generate=true
// +groupName=baton.dev
package v1
