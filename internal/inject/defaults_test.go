package inject_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	batonv1 "github.com/baton-dev/baton/api/v1"
	"github.com/baton-dev/baton/internal/inject"
	"github.com/baton-dev/baton/internal/sidecarcontract"
)

// ownedPod is appPod owned by a controller of the given apiVersion and kind ("" for a bare pod).
func ownedPod(apiVersion, kind string) *corev1.Pod {
	p := appPod()
	if kind != "" {
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: apiVersion, Kind: kind, Name: "owner", UID: "u-1", Controller: ptr.To(true)}}
	}
	return p
}

// injectedAs is what a pod's injection says about its traffic and its app: the sidecar's mode
// and policy, whether the app is held back until the locks are held (the startup probe), the
// readiness gate and the role label.
type injectedAs struct {
	mode      string
	traffic   string
	heldBack  bool
	gate      bool
	roleLabel string
}

func describe(t *testing.T, p *corev1.Pod) injectedAs {
	t.Helper()
	sc := sidecarOf(t, p)
	var got injectedAs
	for _, e := range sc.Env {
		switch e.Name {
		case sidecarcontract.Mode.Env():
			got.mode = e.Value
		case sidecarcontract.TrafficPolicy.Env():
			got.traffic = e.Value
		}
	}
	got.heldBack = sc.StartupProbe != nil
	for _, g := range p.Spec.ReadinessGates {
		if g.ConditionType == batonv1.ConditionLockHeld {
			got.gate = true
		}
	}
	got.roleLabel = p.Labels[batonv1.LabelRole]
	return got
}

// TestDefaultsPerWorkloadKind: with neither spec.mode nor spec.trafficPolicy set, the pods of
// workloads that are rolled out (a Deployment's ReplicaSet, a StatefulSet, a DaemonSet) get the
// Label policy and an app that starts at once, so every pod becomes Ready and a rollout
// completes, while the sidecar still queues for the lock at start; the pods of Jobs (and so
// CronJobs) keep Blocking with the app held back until the lock is held, and no traffic policy;
// bare pods and pods of other owners keep Blocking with ReadinessGate. Explicit settings win.
func TestDefaultsPerWorkloadKind(t *testing.T) {
	rolled := injectedAs{mode: "Blocking", traffic: "Label", heldBack: false, roleLabel: batonv1.RoleStandby}
	job := injectedAs{mode: "Blocking", traffic: "None", heldBack: true}
	bare := injectedAs{mode: "Blocking", traffic: "ReadinessGate", heldBack: true, gate: true}
	for _, tc := range []struct {
		name    string
		pod     *corev1.Pod
		mode    batonv1.LockMode
		traffic batonv1.TrafficPolicy
		want    injectedAs
	}{
		{"Deployment's ReplicaSet", ownedPod("apps/v1", "ReplicaSet"), "", "", rolled},
		{"StatefulSet", ownedPod("apps/v1", "StatefulSet"), "", "", rolled},
		{"DaemonSet", ownedPod("apps/v1", "DaemonSet"), "", "", rolled},
		{"Job (and CronJob)", ownedPod("batch/v1", "Job"), "", "", job},
		{"bare pod", ownedPod("", ""), "", "", bare},
		{"other owner", ownedPod("example.com/v1", "Widget"), "", "", bare},
		{"non-controller owner", func() *corev1.Pod {
			p := ownedPod("apps/v1", "ReplicaSet")
			p.OwnerReferences[0].Controller = nil
			return p
		}(), "", "", bare},
		// Explicit settings win over the kind's defaults.
		{"Deployment, explicit Blocking", ownedPod("apps/v1", "ReplicaSet"), batonv1.ModeBlocking, "",
			injectedAs{mode: "Blocking", traffic: "Label", heldBack: true, roleLabel: batonv1.RoleStandby}},
		{"Deployment, explicit ReadinessGate", ownedPod("apps/v1", "ReplicaSet"), "", batonv1.TrafficReadinessGate,
			injectedAs{mode: "Blocking", traffic: "ReadinessGate", heldBack: true, gate: true}},
		{"Deployment, explicit Blocking and ReadinessGate", ownedPod("apps/v1", "ReplicaSet"), batonv1.ModeBlocking, batonv1.TrafficReadinessGate,
			injectedAs{mode: "Blocking", traffic: "ReadinessGate", heldBack: true, gate: true}},
		{"Deployment, explicit Try", ownedPod("apps/v1", "ReplicaSet"), batonv1.ModeTry, "",
			injectedAs{mode: "Try", traffic: "Label", roleLabel: batonv1.RoleStandby}},
		{"Deployment, explicit None", ownedPod("apps/v1", "ReplicaSet"), "", batonv1.TrafficNone,
			injectedAs{mode: "Blocking", traffic: "None", heldBack: true}},
		{"Job, explicit Label", ownedPod("batch/v1", "Job"), "", batonv1.TrafficLabel,
			injectedAs{mode: "Blocking", traffic: "Label", heldBack: true, roleLabel: batonv1.RoleStandby}},
		{"Job, explicit Try", ownedPod("batch/v1", "Job"), batonv1.ModeTry, "",
			injectedAs{mode: "Try", traffic: "None"}},
		{"bare pod, explicit Label", ownedPod("", ""), "", batonv1.TrafficLabel,
			injectedAs{mode: "Blocking", traffic: "Label", heldBack: true, roleLabel: batonv1.RoleStandby}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dl := validLock()
			dl.Spec.Mode, dl.Spec.TrafficPolicy = tc.mode, tc.traffic
			out, err := inject.Inject(tc.pod, dl, testConfig("unit"))
			if err != nil {
				t.Fatal(err)
			}
			if got := describe(t, out); got != tc.want {
				t.Errorf("injected as %+v, want %+v", got, tc.want)
			}
		})
	}
}
