package e2e

import (
	"context"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	batonv1 "github.com/baton-dev/baton/api/v1"
	"github.com/baton-dev/baton/internal/testing/images/demoapp"
	"github.com/baton-dev/baton/internal/testing/testenv"
	"github.com/baton-dev/baton/sidecarclient"
)

// TestRevokeAStuckHolder: a holder that never lets go (Blocking mode holds for the pod's life) is
// revoked through the baton.dev/revoke annotation. The operator binds the request to the current
// token, revokes it and records it; the lock and the Service's answers move to another pod with a
// larger token. It logs the time from the annotation to the first answer from the next holder.
func TestRevokeAStuckHolder(t *testing.T) {
	t.Parallel() // no timing bound but generous deadlines: runs beside the others of its kind
	c := batonCluster(t)
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	ns := testenv.Namespace(t, c.client, "revoke-")
	svcIP := deployDemo(t, ctx, c, ns, 2, batonv1.ModeBlocking, batonv1.TrafficReadinessGate)
	holder, token := waitForOneReady(t, ctx, c, ns, 2)

	answers := demoapp.Poll(ctx, "http://"+svcIP+"/", 50*time.Millisecond, nil)
	var dl batonv1.DistributedLock
	if err := c.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "demo"}, &dl); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(dl.DeepCopy())
	if dl.Annotations == nil {
		dl.Annotations = map[string]string{}
	}
	dl.Annotations[batonv1.AnnotationRevoke] = "demo"
	revoked := time.Now()
	if err := c.client.Patch(ctx, &dl, patch); err != nil {
		t.Fatal(err)
	}

	var next demoapp.Answer
	testenv.WaitFor(t, "an answer from the next holder", 2*time.Minute, func() bool {
		for _, a := range answers.Since(0) {
			if a.Err == nil && a.Status.Pod != holder.Name && a.Status.State == sidecarclient.StateHeld {
				next = a
				return true
			}
		}
		return false
	})
	answers.Stop()
	if next.Status.Token <= token {
		t.Errorf("next holder %s has token %d, want more than the revoked %d", next.Status.Pod, next.Status.Token, token)
	}
	t.Logf("revoked %s (token %d); %s answered through the Service with token %d %s after the annotation",
		holder.Name, token, next.Status.Pod, next.Status.Token, next.At.Sub(revoked).Round(time.Millisecond))

	testenv.WaitFor(t, "the revocation recorded and the annotation removed", time.Minute, func() bool {
		if err := c.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "demo"}, &dl); err != nil {
			t.Fatal(err)
		}
		_, pending := dl.Annotations[batonv1.AnnotationRevoke]
		st := batonv1.LockStatus{}
		if len(dl.Status.Locks) > 0 {
			st = dl.Status.Locks[0]
		}
		return !pending && st.LastRevocation != nil && st.LastRevocation.Token == token
	})
}
