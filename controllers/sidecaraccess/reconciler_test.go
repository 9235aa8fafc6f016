package sidecaraccess_test

import (
	"context"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	batonv1 "github.com/baton-dev/baton/api/v1"
	"github.com/baton-dev/baton/controllers/sidecaraccess"
)

func TestAccessFollowsLocksAndPods(t *testing.T) {
	f := setup(t)
	ctx := context.Background()

	// A lock and no pods yet: a RoleBinding of the status ClusterRole without subjects.
	dl := newLock(f.ns, "jobs", batonv1.TrafficReadinessGate)
	create(t, f.c, dl)
	expectAccess(t, f, statusRole)

	// Injected pods: their service accounts, sorted, once each, "default" for none. A pod that is
	// not injected grants nothing.
	a, b := newPod(f.ns, "a", "worker", dl.Name, true), newPod(f.ns, "b", "worker", dl.Name, true)
	c := newPod(f.ns, "c", "", dl.Name, true)
	plain := newPod(f.ns, "plain", "bystander", "", false)
	create(t, f.c, a, b, c, plain)
	expectAccess(t, f, statusRole, "default", "worker")

	// The Label traffic policy needs patch on pods too: the binding is replaced by one of the
	// other ClusterRole (a roleRef cannot change).
	dl.Spec.TrafficPolicy = batonv1.TrafficLabel
	if err := f.c.Update(ctx, dl); err != nil {
		t.Fatal(err)
	}
	expectAccess(t, f, labelRole, "default", "worker")

	// A finished pod's sidecar no longer runs: its service account drops out.
	c.Status.Phase = corev1.PodSucceeded
	if err := f.c.Status().Update(ctx, c); err != nil {
		t.Fatal(err)
	}
	expectAccess(t, f, labelRole, "worker")

	// Drift is repaired: foreign subjects, a deleted RoleBinding.
	var rb rbacv1.RoleBinding
	if err := f.c.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: "baton-sidecar"}, &rb); err != nil {
		t.Fatal(err)
	}
	rb.Subjects = append(rb.Subjects, rbacv1.Subject{Kind: "ServiceAccount", Namespace: f.ns, Name: "intruder"})
	if err := f.c.Update(ctx, &rb); err != nil {
		t.Fatal(err)
	}
	expectAccess(t, f, labelRole, "worker")
	remove(t, f.c, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "baton-sidecar"}})
	expectAccess(t, f, labelRole, "worker")

	// Without the lock, the injected pods still need their grant; the pods patch goes.
	remove(t, f.c, dl)
	expectAccess(t, f, statusRole, "worker")

	// Nothing left that needs a sidecar: the binding is deleted.
	remove(t, f.c, a, b, c)
	expectNoAccess(t, f)

	// An injected pod alone brings them back.
	create(t, f.c, newPod(f.ns, "d", "other-worker", "jobs", true))
	expectAccess(t, f, statusRole, "other-worker")
}

// TestOnlyInjectedPodsGetAccess: the sidecar's permissions go to the service accounts of pods the
// webhook injected, not to any pod that carries the label baton.dev/injected=true. A pod whose
// author set the markers itself (the webhook now denies it; this environment runs none, so the
// operator's own check is what is tested) and a pod labelled after its creation have no sidecar
// container, which can only be added when a pod is created.
func TestOnlyInjectedPodsGetAccess(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	dl := newLock(f.ns, "jobs", batonv1.TrafficReadinessGate)
	create(t, f.c, dl)

	forged := newPod(f.ns, "forged", "intruder", dl.Name, false)
	forged.Labels[batonv1.LabelInjected] = "true"
	forged.Annotations = map[string]string{batonv1.AnnotationLock: dl.Name, batonv1.AnnotationInjected: sidecarImage}
	relabelled := newPod(f.ns, "relabelled", "relabelled", "", false)
	// Created before the real pod: every reconcile that sees the real pod sees these too.
	create(t, f.c, forged, relabelled)
	patch := []byte(`{"metadata":{"labels":{"baton.dev/injected":"true"},"annotations":{"baton.dev/injected":"x"}}}`)
	if err := f.c.Patch(ctx, relabelled, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatal(err)
	}
	create(t, f.c, newPod(f.ns, "real", "worker", dl.Name, true))
	expectAccess(t, f, statusRole, "worker")
}

// TestReconcileWritesOnlyWhatDiffers calls Reconcile directly, with a client that counts writes,
// on namespaces whose state is already right: it must not write.
func TestReconcileWritesOnlyWhatDiffers(t *testing.T) {
	f := setup(t)
	ctx := logf.IntoContext(context.Background(), testLogger("direct")) // as a controller would
	dl := newLock(f.ns, "jobs", batonv1.TrafficLabel)
	create(t, f.c, dl, newPod(f.ns, "a", "worker", dl.Name, true))
	expectAccess(t, f, labelRole, "worker")

	var writes atomic.Int32
	count := interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			writes.Add(1)
			return c.Create(ctx, obj, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			writes.Add(1)
			return c.Update(ctx, obj, opts...)
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			writes.Add(1)
			return c.Patch(ctx, obj, patch, opts...)
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			writes.Add(1)
			return c.Delete(ctx, obj, opts...)
		},
	}
	// Reads go straight to the API server, so they see the state expectAccess saw.
	r := &sidecaraccess.Reconciler{Client: interceptor.NewClient(f.c, count)}
	req := ctrl.Request{NamespacedName: types.NamespacedName{Namespace: f.ns, Name: "baton-sidecar"}}
	for range 3 {
		if _, err := r.Reconcile(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	if n := writes.Load(); n != 0 {
		t.Errorf("Reconcile of a namespace in the desired state wrote %d times, want 0", n)
	}

	// A RoleBinding named baton-sidecar that the operator did not make, in a namespace that needs
	// none, is left alone.
	g := setup(t)
	foreign := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: g.ns, Name: "baton-sidecar"},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "view"}}
	create(t, g.c, foreign)
	req.Namespace = g.ns
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	if n := writes.Load(); n != 0 {
		t.Errorf("Reconcile wrote %d times in a namespace with a foreign RoleBinding and no locks, want 0", n)
	}
	if err := g.c.Get(ctx, client.ObjectKeyFromObject(foreign), &rbacv1.RoleBinding{}); err != nil {
		t.Errorf("foreign RoleBinding: %v", err)
	}
}

// TestForeignRoleBindingIsReplaced: a RoleBinding named baton-sidecar that binds another role
// cannot be updated (roleRef is immutable); the Reconciler replaces it and takes it over.
func TestForeignRoleBindingIsReplaced(t *testing.T) {
	f := setup(t)
	foreign := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "baton-sidecar"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "view"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: f.ns, Name: "intruder"}},
	}
	create(t, f.c, foreign)
	create(t, f.c, newLock(f.ns, "jobs", batonv1.TrafficReadinessGate), newPod(f.ns, "a", "worker", "jobs", true))
	expectAccess(t, f, statusRole, "worker")
}
