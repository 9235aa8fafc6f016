package controllers

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	batonv1 "github.com/baton-dev/baton/api/v1"
)

// recorded is one Event an eventLog was given.
type recorded struct {
	regarding, reason, note string // regarding: "<Go type> <name>"
}

// eventLog is an events.EventRecorder that keeps what it is given, in memory.
type eventLog struct {
	mu     sync.Mutex
	events []recorded
}

func (l *eventLog) Eventf(regarding, _ runtime.Object, _, reason, _, note string, args ...interface{}) {
	name := "?"
	if m, err := meta.Accessor(regarding); err == nil {
		name = m.GetName()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, recorded{fmt.Sprintf("%T %s", regarding, name), reason, fmt.Sprintf(note, args...)})
}

func (l *eventLog) take() []recorded {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.events
	l.events = nil
	return out
}

// TestRolloutWouldStallOnTheWorkload: a Deployment that would stall gets the RolloutWouldStall
// Event itself, not only its lock, once; a second problem raises an Event on its own workload
// only. (In-memory fake client and recorder; internal/operator's TestRolloutSafeCondition checks
// the Events on a real API server.)
func TestRolloutWouldStallOnTheWorkload(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	web := deployment("web", 3, appsv1.DeploymentStrategy{}, template("leader"))
	fine := deployment("fine", 3, rolling(intstr.FromString("100%")), template("leader"))
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(&web, &fine).Build()
	log := &eventLog{}
	r := &DistributedLockReconciler{Client: c, Recorder: log}
	dl := blockingLock()
	ctx := context.Background()

	r.rolloutSafety(ctx, dl)
	got := log.take()
	if len(got) != 2 || got[0].regarding != "*v1.DistributedLock leader" || got[1].regarding != "*v1.Deployment web" {
		t.Fatalf("events %+v, want one on DistributedLock leader and one on Deployment web", got)
	}
	for _, e := range got {
		if e.reason != ReasonRolloutWouldStall || !strings.Contains(e.note, "Deployment web: a rollout would stall") {
			t.Errorf("event %+v", e)
		}
	}
	if !strings.Contains(got[1].note, "DistributedLock leader") {
		t.Errorf("the Deployment's event %q does not name the lock", got[1].note)
	}
	if c := meta.FindStatusCondition(dl.Status.Conditions, batonv1.ConditionRolloutSafe); c == nil || c.Status != metav1.ConditionFalse {
		t.Errorf("RolloutSafe %+v, want False", c)
	}

	r.rolloutSafety(ctx, dl)
	if got := log.take(); len(got) != 0 {
		t.Errorf("the same problem again raised %+v", got)
	}

	// fine starts to stall too: the lock's Event says both, only fine gets one of its own.
	fine.Spec.Strategy = appsv1.DeploymentStrategy{}
	if err := c.Update(ctx, &fine); err != nil {
		t.Fatal(err)
	}
	r.rolloutSafety(ctx, dl)
	got = log.take()
	if len(got) != 2 || got[0].regarding != "*v1.DistributedLock leader" || got[1].regarding != "*v1.Deployment fine" {
		t.Fatalf("events %+v, want one on the lock and one on Deployment fine", got)
	}
}
