// Package sidecaraccess gives baton's sidecars the Kubernetes permissions they need, and no more.
//
// A sidecar writes only to its own pod: the baton.dev/lock-held condition, with a PATCH of
// pods/status (traffic policy ReadinessGate), or the baton.dev/role label, with a PATCH of pods
// (traffic policy Label), and with spec.handoff NewestRevision the baton.dev/stepped-aside
// condition (pods/status), its answer to the operator's superseded mark. With
// spec.yieldWhenUnready or handoff NewestRevision it also reads its own pod, from the answer to a
// PATCH of pods/status that changes nothing (see sidecar.PodWatch): no get is granted, because
// RBAC cannot limit a read to the reader's own pod while the policy below limits the patch. It
// runs with its pod's service account, which it shares with the app.
//
// The model has two halves:
//
//   - RBAC: two fixed ClusterRoles, installed with the operator (config/sidecar): baton-sidecar
//     allows patch on pods/status, baton-sidecar-label patch on pods/status and on pods; nothing
//     else (no get, list or watch). The Reconciler keeps, in every namespace that has a
//     DistributedLock or an injected pod (inject.Injected: the label and annotation
//     baton.dev/injected and the sidecar container, which the webhook adds at creation and lets
//     nobody add or change later), a RoleBinding named baton-sidecar to the first, or to the
//     second when some DistributedLock of the namespace uses the Label traffic policy. Its subjects are the service accounts of the namespace's injected
//     pods. RBAC cannot name a pod that does not exist yet, so on its own this lets every such
//     token patch every pod of the namespace.
//   - Admission: the ValidatingAdmissionPolicy baton-sidecar-own-pod (config/policy) takes that
//     RoleBinding as its parameter and, for requests of its subjects only, denies an update of a
//     pod or its status unless the request carries a service-account token bound to that very
//     pod (the token's pod-name and pod-uid claims, which the API server puts in the user's extra
//     information), and denies any change other than the baton.dev/role label (pods) or the
//     baton.dev/lock-held and baton.dev/stepped-aside conditions (pods/status).
//
// Together they mean that a compromised sidecar, or the app that shares its token, can flip its
// own pod's conditions or label and nothing else: not another pod's readiness, not its own spec,
// labels or other conditions. Service accounts that are not subjects of the RoleBinding are left
// to RBAC alone. (An app that sets baton.dev/stepped-aside itself can make a rollout's hand-off
// go through its old pod: one more move of the lock, never two holders.)
//
// What it does not guarantee:
//   - "Injected" rests on the webhook: it denies a pod created with the markers and any update
//     that changes them. A pod created while the webhook configuration was absent, or one that a
//     cluster admin exempted from it, is taken at its word.
//   - The grant is per service account. A pod that is not injected but runs with the same service
//     account gets the same narrow rights on its own pod; give baton workloads their own service
//     account to avoid that. Conversely, an injected app whose service account must update other
//     pods (a controller, say) is denied by the policy; run it with the policy left out.
//   - Tokens that are not bound to a pod (legacy Secret tokens, TokenRequests without a bound
//     object) of a subject are denied by the policy; the kubelet's projected token is bound.
//   - Without the policy installed (it is plain manifests, not created by the operator), the
//     ClusterRoles still limit the sidecar to patching pods and their status, but of any pod in
//     the namespace.
//   - Pods that finished (phase Succeeded or Failed) no longer count: their sidecar does not run.
//     The subjects follow the pods with the delay of the operator's watch, so a new pod's first
//     patches may be refused until its service account is bound; the sidecar retries.
//   - The operator holds the RBAC verb bind on the two ClusterRoles (by name) instead of their
//     rights, and writes no Role: it can grant the sidecars these rules and no others. It can
//     create RoleBindings of any name to any role whose every right it holds itself (RBAC cannot
//     limit create by name); the ValidatingAdmissionPolicy baton-operator-rolebindings
//     (config/policy) refuses it any RoleBinding but baton-sidecar to one of the two ClusterRoles.
//   - Switching a namespace between the two ClusterRoles replaces the RoleBinding (its roleRef
//     cannot change): for that moment its sidecars have no grant, and their writes are retried.
//   - Namespaces upgraded from a version that wrote a Role baton-sidecar keep that Role, unbound
//     and unused; the operator may no longer delete it (kubectl delete role -A -l
//     app.kubernetes.io/managed-by=baton-operator does).
package sidecaraccess
