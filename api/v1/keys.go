package v1

// The baton.dev keys on pods that users see, write or select on. Every part of baton names them
// through these constants; the keys on a DistributedLock and its Secrets (AnnotationRevoke,
// AnnotationSuperseded, LabelCassandraSecret) sit beside the fields they act on.

// Annotations on a pod that steer injection.
const (
	// AnnotationLock names the DistributedLock, in the pod's namespace, whose locks the pod holds.
	// A pod without it is never injected.
	AnnotationLock = "baton.dev/lock"
	// AnnotationInject set to "false" (or "no", "off", "n", "0") opts a pod out of injection even
	// though it carries AnnotationLock.
	AnnotationInject = "baton.dev/inject"
	// AnnotationInjected is set by the webhook to the sidecar image. Like LabelInjected it is a
	// marker only the webhook's own mutation may set (a pod created with it is denied).
	AnnotationInjected = "baton.dev/injected"
	// LabelInjected ("true") marks injected pods, so that the operator can watch only those and
	// grant their service accounts the sidecar's permissions.
	LabelInjected = "baton.dev/injected"
)

// What the sidecar writes on its own pod.
const (
	// ConditionLockHeld is the readiness-gate condition of the ReadinessGate traffic policy: the
	// webhook adds the gate, the sidecar sets it True while it holds every lock.
	ConditionLockHeld = "baton.dev/lock-held"
	// ConditionSteppedAside is the sidecar's answer to the operator's AnnotationSuperseded mark
	// (handoff NewestRevision): True, with the mark as its message, once the sidecar takes no grant
	// while the mark stays on the pod (it left the queue, refuses acquisitions, and none is in
	// flight); False once it read the pod without the mark and may take grants again. The operator
	// marks an old holder only once every old pod that does not hold has stepped aside.
	ConditionSteppedAside = "baton.dev/stepped-aside"
	// LabelRole is the pod label of the Label traffic policy.
	LabelRole = "baton.dev/role"
	// RoleHolder and RoleStandby are the values of LabelRole. The webhook sets RoleStandby at
	// injection, so no pod starts out as a holder.
	RoleHolder  = "holder"
	RoleStandby = "standby"
)
