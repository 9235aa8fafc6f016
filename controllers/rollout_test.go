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

// blockingLock is a DistributedLock that holds its pods' apps back (spec.mode Blocking, set):
// its standbys are never Ready.
func blockingLock() *batonv1.DistributedLock {
	return &batonv1.DistributedLock{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "leader"},
		Spec: batonv1.DistributedLockSpec{Mode: batonv1.ModeBlocking}}
}

func TestRolloutProblemsDeployments(t *testing.T) {
	dl := blockingLock()
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
	stock := []appsv1.Deployment{deployment("web", 3, appsv1.DeploymentStrategy{}, template("leader"))}
	for _, tc := range []struct {
		mode    batonv1.LockMode
		traffic batonv1.TrafficPolicy
		want    string // "" = no problem
	}{
		// The defaults of a Deployment's pods: Label, the app started at once.
		{"", "", ""},
		{"", batonv1.TrafficLabel, ""},
		{batonv1.ModeTry, "", ""},
		{batonv1.ModeTry, batonv1.TrafficLabel, ""},
		{batonv1.ModeTry, batonv1.TrafficNone, ""},
		// In mode Blocking, set or (under another policy than Label) left unset, the startup
		// probe keeps a standby's app from starting, so the standby is never Ready whatever the
		// traffic policy: the real kubelet in test/e2e showed it.
		{batonv1.ModeBlocking, "", "mode Blocking"},
		{batonv1.ModeBlocking, batonv1.TrafficLabel, "mode Blocking"},
		{"", batonv1.TrafficNone, "mode Blocking"},
		{"", batonv1.TrafficReadinessGate, "mode Blocking"},
		{batonv1.ModeTry, batonv1.TrafficReadinessGate, "trafficPolicy ReadinessGate"},
	} {
		l := dl.DeepCopy()
		l.Spec.Mode, l.Spec.TrafficPolicy = tc.mode, tc.traffic
		got := RolloutProblems(l, stock, nil)
		switch {
		case tc.want == "" && len(got) > 0:
			t.Errorf("mode %q, trafficPolicy %q: problems %q, want none (standbys' apps run and they are Ready)", tc.mode, tc.traffic, got)
		case tc.want != "" && (len(got) != 1 || !strings.Contains(got[0], tc.want) || !strings.Contains(got[0], "remove spec.mode and spec.trafficPolicy")):
			t.Errorf("mode %q, trafficPolicy %q: problems %q, want one saying %q and naming the defaults", tc.mode, tc.traffic, got, tc.want)
		}
	}
}

// TestRolloutStallsNameTheWorkload: each stall points at its workload, so that the reconciler
// can raise the Event on it.
func TestRolloutStallsNameTheWorkload(t *testing.T) {
	deps := []appsv1.Deployment{deployment("web", 3, appsv1.DeploymentStrategy{}, template("leader")),
		deployment("fine", 3, rolling(intstr.FromString("100%")), template("leader"))}
	sets := []appsv1.StatefulSet{{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "db"},
		Spec: appsv1.StatefulSetSpec{Replicas: ptr.To(int32(3)), Template: template("leader")}}}
	got := RolloutStalls(blockingLock(), deps, sets)
	if len(got) != 2 || got[0].Workload != &deps[0] || got[1].Workload != &sets[0] {
		t.Fatalf("stalls %+v, want Deployment web and StatefulSet db", got)
	}
	if !strings.HasPrefix(got[0].Message, "Deployment web:") || !strings.HasPrefix(got[1].Message, "StatefulSet db:") {
		t.Errorf("messages %q, %q", got[0].Message, got[1].Message)
	}
}

func TestRolloutProblemsStatefulSets(t *testing.T) {
	dl := blockingLock()
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
