package controllers

import (
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batonv1 "github.com/baton-dev/baton/api/v1"
	"github.com/baton-dev/baton/internal/inject"
)

// Stall is a workload whose rollout would stall, and why.
type Stall struct {
	// Workload is the *appsv1.Deployment or *appsv1.StatefulSet, a pointer into the list given
	// to RolloutStalls.
	Workload client.Object
	// Message names the workload, says why it would stall and the setting that fixes it.
	Message string
}

// RolloutStalls explains, workload by workload, why rollouts of the Deployments and
// StatefulSets that use dl (pod template annotation baton.dev/lock: <dl.Name>) would stall, and
// the setting that fixes each. Their pods get the defaults of inject.WorkloadRolled for what dl
// leaves unset (inject.Defaults). It returns nothing when standbys can be Ready: under those
// defaults (trafficPolicy Label, the app started at once), or in mode Try with trafficPolicy
// Label or None.
//
// Standbys stay NotReady, whatever their revision, in two cases: under ReadinessGate, which
// makes only the holder Ready; and when the app is held back until the lock is held (spec.mode
// Blocking set explicitly, or unset under a policy other than Label), because the sidecar's
// startup probe holds a pod's app containers back, so a standby's app never starts (a real
// kubelet showed this; see standbysStayNotReady). A Deployment scales down its old pods only
// while at least replicas − maxUnavailable pods are available. Once the old holder is the last
// old pod and the new pods wait for its lock, one pod is available, so the holder is removed only
// when replicas − maxUnavailable ≤ 0: the rollout needs maxUnavailable ≥ replicas (100%) or the
// Recreate strategy. A StatefulSet creates pods one by one after the previous is Ready
// (OrderedReady) and rolls one pod at a time waiting for the updated pod to be Ready, which a
// standby never is. It does not look at DaemonSets, nor at what the pods' own probes do.
func RolloutStalls(dl *batonv1.DistributedLock, deployments []appsv1.Deployment, statefulSets []appsv1.StatefulSet) []Stall {
	why, fix := standbysStayNotReady(dl)
	if why == "" {
		return nil
	}
	var out []Stall
	for i := range deployments {
		d := &deployments[i]
		if usesLock(d.Namespace, d.Spec.Template.Annotations, dl) {
			if p := deploymentProblem(d, why, fix); p != "" {
				out = append(out, Stall{Workload: d, Message: p})
			}
		}
	}
	for i := range statefulSets {
		s := &statefulSets[i]
		if usesLock(s.Namespace, s.Spec.Template.Annotations, dl) {
			if p := statefulSetProblem(s, why, fix); p != "" {
				out = append(out, Stall{Workload: s, Message: p})
			}
		}
	}
	return out
}

// RolloutProblems is the messages of RolloutStalls.
func RolloutProblems(dl *batonv1.DistributedLock, deployments []appsv1.Deployment, statefulSets []appsv1.StatefulSet) []string {
	var out []string
	for _, s := range RolloutStalls(dl, deployments, statefulSets) {
		out = append(out, s.Message)
	}
	return out
}

// usesLock reports whether a pod template with these annotations in namespace uses dl.
func usesLock(namespace string, annotations map[string]string, dl *batonv1.DistributedLock) bool {
	return namespace == dl.Namespace && strings.TrimSpace(annotations[batonv1.AnnotationLock]) == dl.Name &&
		!inject.OptedOut(annotations[batonv1.AnnotationInject])
}

// rolloutDefaults is what fixes a stall by leaving the settings to the defaults of Deployments
// and StatefulSets.
const rolloutDefaults = "or remove spec.mode and spec.trafficPolicy from the DistributedLock: the defaults for " +
	"Deployments and StatefulSets start the app at once on every pod and label only the holder " +
	batonv1.LabelRole + "=" + batonv1.RoleHolder + ", for a Service that selects it"

// standbysStayNotReady says why the pods of Deployments and StatefulSets that wait for dl's lock
// are never Ready, and the change to dl that would let them be; "" when they can be Ready.
func standbysStayNotReady(dl *batonv1.DistributedLock) (why, fix string) {
	b := inject.Defaults(dl.Spec, inject.WorkloadRolled)
	switch {
	case b.HoldBackApp:
		// The injected startup probe ("baton wait") gates the app containers until the locks are
		// held; without native sidecars it keeps the sidecar, and so the pod, NotReady instead.
		return "standbys stay NotReady in mode Blocking (their app containers start only once they hold the lock)", rolloutDefaults
	case b.Traffic == batonv1.TrafficReadinessGate:
		return "standbys stay NotReady under trafficPolicy ReadinessGate", rolloutDefaults
	}
	return "", ""
}

func deploymentProblem(d *appsv1.Deployment, why, fix string) string {
	replicas := int32(1)
	if d.Spec.Replicas != nil {
		replicas = *d.Spec.Replicas
	}
	if replicas == 0 || d.Spec.Strategy.Type == appsv1.RecreateDeploymentStrategyType {
		return ""
	}
	maxUnavailable := intstr.FromString("25%")
	if ru := d.Spec.Strategy.RollingUpdate; ru != nil && ru.MaxUnavailable != nil {
		maxUnavailable = *ru.MaxUnavailable
	}
	allowed, err := intstr.GetScaledValueFromIntOrPercent(&maxUnavailable, int(replicas), false)
	if err != nil {
		return fmt.Sprintf("Deployment %s: spec.strategy.rollingUpdate.maxUnavailable %s: %v", d.Name, maxUnavailable.String(), err)
	}
	if allowed >= int(replicas) {
		return ""
	}
	return fmt.Sprintf("Deployment %s: a rollout would stall: %s, "+
		"but maxUnavailable %s allows only %d of %d replicas to be unavailable, so the old holder is never replaced; "+
		"set spec.strategy.rollingUpdate.maxUnavailable to 100%% or spec.strategy.type to Recreate, %s",
		d.Name, why, maxUnavailable.String(), allowed, replicas, fix)
}

func statefulSetProblem(s *appsv1.StatefulSet, why, fix string) string {
	replicas := int32(1)
	if s.Spec.Replicas != nil {
		replicas = *s.Spec.Replicas
	}
	if replicas <= 1 {
		return ""
	}
	var fixes []string
	if s.Spec.PodManagementPolicy != appsv1.ParallelPodManagement {
		fixes = append(fixes, "spec.podManagementPolicy to Parallel (OrderedReady waits for each standby to become Ready)")
	}
	if s.Spec.UpdateStrategy.Type != appsv1.OnDeleteStatefulSetStrategyType {
		allowed := 1
		if ru := s.Spec.UpdateStrategy.RollingUpdate; ru != nil && ru.MaxUnavailable != nil {
			if v, err := intstr.GetScaledValueFromIntOrPercent(ru.MaxUnavailable, int(replicas), false); err == nil {
				allowed = v
			}
		}
		if allowed < int(replicas) {
			fixes = append(fixes, "spec.updateStrategy.type to OnDelete, or spec.updateStrategy.rollingUpdate.maxUnavailable to 100% where the cluster supports it (a rolling update waits for each updated standby to become Ready)")
		}
	}
	if len(fixes) == 0 {
		return ""
	}
	return fmt.Sprintf("StatefulSet %s: %s, so it would stall; set %s, %s",
		s.Name, why, strings.Join(fixes, ", and "), fix)
}
