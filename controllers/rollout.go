package controllers

import (
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	batonv1 "github.com/baton-dev/baton/api/v1"
	"github.com/baton-dev/baton/internal/inject"
)

// RolloutProblems explains, workload by workload, why rollouts of the Deployments and
// StatefulSets that use dl (pod template annotation baton.dev/lock: <dl.Name>) would stall, and
// the setting that fixes each. It returns nothing when standbys can be Ready: mode Try with
// trafficPolicy Label or None.
//
// Standbys stay NotReady, whatever their revision, in two cases: under ReadinessGate, which
// makes only the holder Ready; and in mode Blocking under any policy, because the sidecar's
// startup probe holds a pod's app containers back until it holds the lock, so a standby's app
// never starts (a real kubelet showed this; see standbysStayNotReady). A Deployment scales down its old pods only while at least replicas − maxUnavailable
// pods are available. Once the old holder is the last old pod and the new pods wait for its lock,
// one pod is available, so the holder is removed only when replicas − maxUnavailable ≤ 0: the
// rollout needs maxUnavailable ≥ replicas (100%) or the Recreate strategy. A StatefulSet creates
// pods one by one after the previous is Ready (OrderedReady) and rolls one pod at a time waiting
// for the updated pod to be Ready, which a standby never is.
func RolloutProblems(dl *batonv1.DistributedLock, deployments []appsv1.Deployment, statefulSets []appsv1.StatefulSet) []string {
	why, fix := standbysStayNotReady(dl)
	if why == "" {
		return nil
	}
	var out []string
	for i := range deployments {
		d := &deployments[i]
		if usesLock(d.Namespace, d.Spec.Template.Annotations, dl) {
			if p := deploymentProblem(d, why, fix); p != "" {
				out = append(out, p)
			}
		}
	}
	for i := range statefulSets {
		s := &statefulSets[i]
		if usesLock(s.Namespace, s.Spec.Template.Annotations, dl) {
			if p := statefulSetProblem(s, why, fix); p != "" {
				out = append(out, p)
			}
		}
	}
	return out
}

// usesLock reports whether a pod template with these annotations in namespace uses dl.
func usesLock(namespace string, annotations map[string]string, dl *batonv1.DistributedLock) bool {
	return namespace == dl.Namespace && strings.TrimSpace(annotations[batonv1.AnnotationLock]) == dl.Name &&
		!inject.OptedOut(annotations[batonv1.AnnotationInject])
}

// standbysStayNotReady says why pods that wait for dl's lock are never Ready, and the change to
// dl that would let them be; "" when they can be Ready.
func standbysStayNotReady(dl *batonv1.DistributedLock) (why, fix string) {
	gate := dl.Spec.TrafficPolicy == "" || dl.Spec.TrafficPolicy == batonv1.TrafficReadinessGate
	blocking := dl.Spec.Mode == "" || dl.Spec.Mode == batonv1.ModeBlocking
	switch {
	case blocking:
		// The injected startup probe ("baton wait") gates the app containers until the locks are
		// held; without native sidecars it keeps the sidecar, and so the pod, NotReady instead.
		return "standbys stay NotReady in mode Blocking (their app containers start only once they hold the lock)",
			"or set the DistributedLock's spec.mode to Try and spec.trafficPolicy to Label (the app then asks for the lock itself)"
	case gate:
		return "standbys stay NotReady under trafficPolicy ReadinessGate",
			"or set the DistributedLock's spec.trafficPolicy to Label"
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
