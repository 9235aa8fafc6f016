package inject

import (
	"cmp"
	"strings"

	corev1 "k8s.io/api/core/v1"

	batonv1 "github.com/baton-dev/baton/api/v1"
)

// Workload is the kind of workload a pod belongs to, as far as the defaults of a DistributedLock
// depend on it: the webhook reads it from the controller owner reference the pod is created with.
type Workload string

const (
	// WorkloadRolled: pods of a ReplicaSet (a Deployment's, or another controller's such as an
	// Argo Rollout), ReplicationController, StatefulSet or DaemonSet. Their controllers replace
	// pods one by one and wait for each new pod to become Ready, so a standby must be Ready too.
	WorkloadRolled Workload = "Rolled"
	// WorkloadJob: pods of a Job, so also of a CronJob. Nothing waits for them to be Ready; a pod
	// that waits for the lock simply runs later.
	WorkloadJob Workload = "Job"
	// WorkloadPod: a pod without a controller, or with one of another kind (a custom operator's).
	WorkloadPod Workload = "Pod"
)

// WorkloadOf returns the kind of workload pod belongs to, from its controller owner reference
// (the one with controller: true) as the pod's controller sets it at creation. It looks at the
// kind only, not the API group's version, and looks nothing up: a ReplicaSet is WorkloadRolled
// whether or not a Deployment owns it. An owner reference without controller: true is ignored.
func WorkloadOf(pod *corev1.Pod) Workload {
	if pod == nil {
		return WorkloadPod
	}
	for _, ref := range pod.OwnerReferences {
		if ref.Controller == nil || !*ref.Controller {
			continue
		}
		group, _, found := strings.Cut(ref.APIVersion, "/")
		if !found {
			group = "" // the core group: "v1"
		}
		switch {
		case group == "apps" && (ref.Kind == "ReplicaSet" || ref.Kind == "StatefulSet" || ref.Kind == "DaemonSet"),
			group == "" && ref.Kind == "ReplicationController":
			return WorkloadRolled
		case group == "batch" && ref.Kind == "Job":
			return WorkloadJob
		}
		return WorkloadPod
	}
	return WorkloadPod
}

// Behaviour is how a pod's sidecar uses a DistributedLock: spec.mode and spec.trafficPolicy
// where the DistributedLock sets them, else the defaults of the pod's Workload.
type Behaviour struct {
	// Mode is the sidecar's mode.
	Mode batonv1.LockMode
	// Traffic is the sidecar's traffic policy.
	Traffic batonv1.TrafficPolicy
	// HoldBackApp says the sidecar's startup probe holds the app containers back until the locks
	// are held (mode Blocking; with native sidecars only, see Config.NativeSidecars).
	HoldBackApp bool
}

// Defaults returns how pods of workload w use a DistributedLock with spec. Explicit settings win:
//
//   - spec.trafficPolicy, when set, is the policy; unset, it is Label for WorkloadRolled (every
//     pod stays Ready, only the holder is labelled baton.dev/role=holder), None for WorkloadJob
//     (nothing sends a Job traffic) and ReadinessGate for WorkloadPod (only the holder is Ready).
//   - spec.mode, when set, is the mode, and Blocking always holds the app back until the locks are
//     held. Unset, the mode is Blocking (the sidecar queues for the locks at start and holds them
//     for the pod's life), and the app is held back except for WorkloadRolled under Label: there
//     the app starts at once so that standbys are Ready and rollouts complete, and only the
//     holder gets traffic, through a Service that selects baton.dev/role=holder.
//
// What it does not guarantee: an app that is not held back runs on every pod, holder or not; an
// app that works on its own (a queue consumer, a schedule) must ask the sidecar or run under
// baton run (docs/concepts-and-safety.md, "What the annotation alone does"). It does not check
// the values; Inject refuses unknown ones.
func Defaults(spec batonv1.DistributedLockSpec, w Workload) Behaviour {
	var traffic batonv1.TrafficPolicy
	switch w {
	case WorkloadRolled:
		traffic = batonv1.TrafficLabel
	case WorkloadJob:
		traffic = batonv1.TrafficNone
	default:
		traffic = batonv1.TrafficReadinessGate
	}
	b := Behaviour{
		Mode:    cmp.Or(spec.Mode, batonv1.ModeBlocking),
		Traffic: cmp.Or(spec.TrafficPolicy, traffic),
	}
	switch {
	case b.Mode != batonv1.ModeBlocking:
	case spec.Mode != "":
		b.HoldBackApp = true
	default:
		b.HoldBackApp = !(w == WorkloadRolled && b.Traffic == batonv1.TrafficLabel)
	}
	return b
}
