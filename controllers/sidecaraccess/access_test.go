package sidecaraccess_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	batonv1 "github.com/baton-dev/baton/api/v1"
	"github.com/baton-dev/baton/controllers/sidecaraccess"
	"github.com/baton-dev/baton/internal/inject"
	"github.com/baton-dev/baton/internal/testing/manifests"
)

func lockIn(ns, name string, traffic batonv1.TrafficPolicy) batonv1.DistributedLock {
	return batonv1.DistributedLock{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       batonv1.DistributedLockSpec{LockIDs: []string{"job"}, TrafficPolicy: traffic},
	}
}

func podIn(ns, name, sa string, injected bool, phase corev1.PodPhase) corev1.Pod {
	p := corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       corev1.PodSpec{ServiceAccountName: sa},
		Status:     corev1.PodStatus{Phase: phase},
	}
	if injected {
		p.Labels = map[string]string{batonv1.LabelInjected: "true"}
		p.Annotations = map[string]string{batonv1.AnnotationInjected: "baton:test"}
		p.Spec.InitContainers = []corev1.Container{{Name: inject.ContainerName}}
	}
	return p
}

// forged is podIn's injected pod without one of the webhook's marks.
func forged(ns, name, sa string, drop func(*corev1.Pod)) corev1.Pod {
	p := podIn(ns, name, sa, true, corev1.PodRunning)
	drop(&p)
	return p
}

func sa(ns, name string) rbacv1.Subject {
	return rbacv1.Subject{Kind: "ServiceAccount", Namespace: ns, Name: name}
}

func TestDesired(t *testing.T) {
	tests := []struct {
		name   string
		locks  []batonv1.DistributedLock
		pods   []corev1.Pod
		needed bool
		want   sidecaraccess.Access
	}{{
		name: "empty namespace needs nothing",
	}, {
		name:  "objects of other namespaces and pods that are not injected do not count",
		locks: []batonv1.DistributedLock{lockIn("other", "l", batonv1.TrafficLabel)},
		pods:  []corev1.Pod{podIn("other", "a", "app", true, ""), podIn("ns", "b", "app", false, "")},
	}, {
		name:   "finished pods do not count",
		pods:   []corev1.Pod{podIn("ns", "a", "app", true, corev1.PodSucceeded), podIn("ns", "b", "app", true, corev1.PodFailed)},
		needed: false,
	}, {
		name:  "pods the webhook did not inject do not count, whatever their labels",
		locks: []batonv1.DistributedLock{lockIn("ns", "l", batonv1.TrafficReadinessGate)},
		pods: []corev1.Pod{
			forged("ns", "a", "no-sidecar", func(p *corev1.Pod) { p.Spec.InitContainers = nil }),
			forged("ns", "b", "no-annotation", func(p *corev1.Pod) { p.Annotations = nil }),
			forged("ns", "c", "no-label", func(p *corev1.Pod) { p.Labels = nil }),
		},
		needed: true,
		want:   sidecaraccess.Access{ClusterRole: statusRole},
	}, {
		name:   "a lock without pods: status patch, no subjects",
		locks:  []batonv1.DistributedLock{lockIn("ns", "l", batonv1.TrafficNone)},
		needed: true,
		want:   sidecaraccess.Access{ClusterRole: statusRole},
	}, {
		// Pods of Deployments, StatefulSets and DaemonSets get Label when the lock leaves the
		// policy unset (inject.Defaults): granted before the first such pod starts.
		name:   "a lock without a traffic policy adds pods patch",
		locks:  []batonv1.DistributedLock{lockIn("ns", "l", "")},
		needed: true,
		want:   sidecaraccess.Access{ClusterRole: labelRole},
	}, {
		name:   "an injected pod without a lock still gets its grant",
		pods:   []corev1.Pod{podIn("ns", "a", "app", true, corev1.PodRunning)},
		needed: true,
		want:   sidecaraccess.Access{ClusterRole: statusRole, Subjects: []rbacv1.Subject{sa("ns", "app")}},
	}, {
		name: "Label traffic adds pods patch; subjects sorted, deduplicated, default for none",
		locks: []batonv1.DistributedLock{
			lockIn("ns", "gate", batonv1.TrafficReadinessGate), lockIn("ns", "label", batonv1.TrafficLabel), lockIn("ns", "none", batonv1.TrafficNone),
		},
		pods: []corev1.Pod{
			podIn("ns", "a", "zeta", true, corev1.PodRunning), podIn("ns", "b", "", true, corev1.PodPending),
			podIn("ns", "c", "alpha", true, corev1.PodRunning), podIn("ns", "d", "zeta", true, corev1.PodRunning),
			podIn("ns", "e", "plain", false, corev1.PodRunning), podIn("ns", "f", "done", true, corev1.PodSucceeded),
		},
		needed: true,
		want: sidecaraccess.Access{
			ClusterRole: labelRole,
			Subjects:    []rbacv1.Subject{sa("ns", "alpha"), sa("ns", "default"), sa("ns", "zeta")},
		},
	}, {
		name:   "ReadinessGate and None need no pods patch",
		locks:  []batonv1.DistributedLock{lockIn("ns", "gate", batonv1.TrafficReadinessGate), lockIn("ns", "none", batonv1.TrafficNone)},
		needed: true,
		want:   sidecaraccess.Access{ClusterRole: statusRole},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, needed := sidecaraccess.Desired("ns", tc.locks, tc.pods)
			if needed != tc.needed {
				t.Fatalf("needed = %v, want %v", needed, tc.needed)
			}
			if !equality.Semantic.DeepEqual(got, tc.want) {
				t.Errorf("access =\n%+v\nwant\n%+v", got, tc.want)
			}
		})
	}
}

func TestAccessObjects(t *testing.T) {
	a := sidecaraccess.Access{ClusterRole: statusRole, Subjects: []rbacv1.Subject{sa("ns", "app")}}
	rb := a.RoleBinding("ns")
	wantLabels := map[string]string{"app.kubernetes.io/managed-by": "baton-operator", "app.kubernetes.io/name": "baton"}
	if m := rb.ObjectMeta; m.Name != "baton-sidecar" || m.Namespace != "ns" || !equality.Semantic.DeepEqual(m.Labels, wantLabels) {
		t.Errorf("metadata = %s/%s %v, want ns/baton-sidecar %v", m.Namespace, m.Name, m.Labels, wantLabels)
	}
	if want := (rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "baton-sidecar"}); rb.RoleRef != want {
		t.Errorf("roleRef = %+v, want %+v", rb.RoleRef, want)
	}
	// The binding does not share its subject list with a.
	rb.Subjects[0].Name = "x"
	if a.Subjects[0].Name != "app" {
		t.Error("RoleBinding shares its subjects with the Access")
	}
}

// TestClusterRolesFile: config/sidecar/clusterroles.yaml, which the chart ships, is what
// ClusterRoles says, and the two grant what the sidecar needs for each traffic policy.
func TestClusterRolesFile(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := rbacv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	objs, err := manifests.Decode(scheme, "../../config/sidecar/clusterroles.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := sidecaraccess.ClusterRoles()
	if len(objs) != len(want) {
		t.Fatalf("%d objects in the file, ClusterRoles returns %d", len(objs), len(want))
	}
	for i, o := range objs {
		got, ok := o.(*rbacv1.ClusterRole)
		if !ok {
			t.Fatalf("object %d is a %T", i, o)
		}
		if got.Name != want[i].Name || !equality.Semantic.DeepEqual(got.Labels, want[i].Labels) || !equality.Semantic.DeepEqual(got.Rules, want[i].Rules) {
			t.Errorf("file:\n%+v\nClusterRoles:\n%+v", got, want[i])
		}
	}
	if want[0].Name != statusRole || !equality.Semantic.DeepEqual(want[0].Rules, []rbacv1.PolicyRule{statusRule}) {
		t.Errorf("%s = %+v, want patch on pods/status only", want[0].Name, want[0].Rules)
	}
	if want[1].Name != labelRole || !equality.Semantic.DeepEqual(want[1].Rules, []rbacv1.PolicyRule{statusRule, podsRule}) {
		t.Errorf("%s = %+v, want patch on pods/status and pods only", want[1].Name, want[1].Rules)
	}
}
