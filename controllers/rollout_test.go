package controllers

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	batonv1 "github.com/baton-dev/baton/api/v1"
)

func template(lock string, extra ...string) corev1.PodTemplateSpec {
	a := map[string]string{batonv1.AnnotationLock: lock}
	for i := 0; i+1 < len(extra); i += 2 {
		a[extra[i]] = extra[i+1]
	}
	return corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Annotations: a}}
}

func deployment(name string, replicas int32, strategy appsv1.DeploymentStrategy, tmpl corev1.PodTemplateSpec) appsv1.Deployment {
	return appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: name},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To(replicas), Strategy: strategy, Template: tmpl}}
}

func rolling(maxUnavailable intstr.IntOrString) appsv1.DeploymentStrategy {
	return appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
		RollingUpdate: &appsv1.RollingUpdateDeployment{MaxUnavailable: &maxUnavailable}}
}

func TestRolloutProblemsDeployments(t *testing.T) {
	dl := &batonv1.DistributedLock{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "leader"}}
	for _, tc := range []struct {
		name string
		d    appsv1.Deployment
		want string // "" = no problem
	}{
		{"default strategy, 3 replicas", deployment("web", 3, appsv1.DeploymentStrategy{}, template("leader")), "maxUnavailable 25% allows only 0 of 3"},
		{"default strategy, 1 replica", deployment("web", 1, appsv1.DeploymentStrategy{}, template("leader")), "0 of 1"},
		{"replicas-1 unavailable still stalls", deployment("web", 3, rolling(intstr.FromInt32(2)), template("leader")), "2 of 3"},
		{"100%", deployment("web", 3, rolling(intstr.FromString("100%")), template("leader")), ""},
		{"absolute = replicas", deployment("web", 3, rolling(intstr.FromInt32(3)), template("leader")), ""},
		{"recreate", deployment("web", 3, appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType}, template("leader")), ""},
		{"scaled to zero", deployment("web", 0, appsv1.DeploymentStrategy{}, template("leader")), ""},
		{"other lock", deployment("web", 3, appsv1.DeploymentStrategy{}, template("other")), ""},
		{"opted out", deployment("web", 3, appsv1.DeploymentStrategy{}, template("leader", batonv1.AnnotationInject, "false")), ""},
		{"bad percentage", deployment("web", 3, rolling(intstr.FromString("lots")), template("leader")), "maxUnavailable lots"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := RolloutProblems(dl, []appsv1.Deployment{tc.d}, nil)
			switch {
			case tc.want == "" && len(got) > 0:
				t.Errorf("problems %q, want none", got)
			case tc.want != "" && (len(got) != 1 || !strings.Contains(got[0], tc.want)):
				t.Errorf("problems %q, want one containing %q", got, tc.want)
			}
		})
	}
	other := dl.DeepCopy()
	other.Namespace = "team-b"
	if got := RolloutProblems(other, []appsv1.Deployment{deployment("web", 3, appsv1.DeploymentStrategy{}, template("leader"))}, nil); len(got) > 0 {
		t.Errorf("a Deployment in another namespace is reported: %q", got)
	}
	for _, policy := range []batonv1.TrafficPolicy{batonv1.TrafficLabel, batonv1.TrafficNone} {
		l := dl.DeepCopy()
		l.Spec.TrafficPolicy, l.Spec.Mode = policy, batonv1.ModeTry
		if got := RolloutProblems(l, []appsv1.Deployment{deployment("web", 3, appsv1.DeploymentStrategy{}, template("leader"))}, nil); len(got) > 0 {
			t.Errorf("mode Try, trafficPolicy %s: problems %q, want none (standbys' apps run and they are Ready)", policy, got)
		}
		// In mode Blocking (also the default) the startup probe keeps a standby's app from
		// starting, so the standby is never Ready whatever the traffic policy: the real kubelet in
		// test/e2e showed it.
		for _, mode := range []batonv1.LockMode{"", batonv1.ModeBlocking} {
			l.Spec.Mode = mode
			got := RolloutProblems(l, []appsv1.Deployment{deployment("web", 3, appsv1.DeploymentStrategy{}, template("leader"))}, nil)
			if len(got) != 1 || !strings.Contains(got[0], "mode Blocking") || !strings.Contains(got[0], "spec.mode to Try") {
				t.Errorf("mode %q, trafficPolicy %s: problems %q, want one saying standbys stay NotReady in mode Blocking", mode, policy, got)
			}
		}
	}
}

func TestRolloutProblemsStatefulSets(t *testing.T) {
	dl := &batonv1.DistributedLock{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "leader"}}
	sts := func(replicas int32, policy appsv1.PodManagementPolicyType, update appsv1.StatefulSetUpdateStrategy) appsv1.StatefulSet {
		return appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "db"},
			Spec: appsv1.StatefulSetSpec{Replicas: ptr.To(replicas), PodManagementPolicy: policy, UpdateStrategy: update, Template: template("leader")}}
	}
	onDelete := appsv1.StatefulSetUpdateStrategy{Type: appsv1.OnDeleteStatefulSetStrategyType}
	all := intstr.FromString("100%")
	maxAll := appsv1.StatefulSetUpdateStrategy{Type: appsv1.RollingUpdateStatefulSetStrategyType,
		RollingUpdate: &appsv1.RollingUpdateStatefulSetStrategy{MaxUnavailable: &all}}
	for _, tc := range []struct {
		name      string
		s         appsv1.StatefulSet
		want, not []string
	}{
		{"defaults", sts(3, "", appsv1.StatefulSetUpdateStrategy{}), []string{"Parallel", "OnDelete"}, nil},
		{"parallel", sts(3, appsv1.ParallelPodManagement, appsv1.StatefulSetUpdateStrategy{}), []string{"OnDelete"}, []string{"podManagementPolicy"}},
		{"parallel, OnDelete", sts(3, appsv1.ParallelPodManagement, onDelete), nil, nil},
		{"parallel, maxUnavailable 100%", sts(3, appsv1.ParallelPodManagement, maxAll), nil, nil},
		{"one replica", sts(1, "", appsv1.StatefulSetUpdateStrategy{}), nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := RolloutProblems(dl, nil, []appsv1.StatefulSet{tc.s})
			if len(tc.want) == 0 {
				if len(got) > 0 {
					t.Errorf("problems %q, want none", got)
				}
				return
			}
			if len(got) != 1 {
				t.Fatalf("problems %q, want one", got)
			}
			for _, w := range tc.want {
				if !strings.Contains(got[0], w) {
					t.Errorf("%q lacks %q", got[0], w)
				}
			}
			for _, n := range tc.not {
				if strings.Contains(got[0], n) {
					t.Errorf("%q mentions %q", got[0], n)
				}
			}
		})
	}
}
