package controllers_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	batonv1 "github.com/baton-dev/baton/api/v1"
	"github.com/baton-dev/baton/controllers"
	"github.com/baton-dev/baton/internal/inject"
	"github.com/baton-dev/baton/internal/webhook"
	"github.com/baton-dev/baton/lock/cassandrastore"
)

// TestWebhookDeniesAPodWithoutCredentials: the webhook, asking the operator's policy as the
// operator wires it, denies a pod of a lock in the operator's own keyspace that names no
// credentials (its sidecar would connect without a login, since the operator's own never reach
// it), saying what to add; once the lock names a labelled Secret, the pod is injected with it.
// The DistributedLocks and Secrets come from an in-memory fake client (controller-runtime's
// fake); TestWebhookDeniesConnectionsTheOperatorRefuses (internal/operator) runs the webhook on
// a real API server.
func TestWebhookDeniesAPodWithoutCredentials(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := batonv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	dl := &batonv1.DistributedLock{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders"},
		Spec: batonv1.DistributedLockSpec{LockIDs: []string{"orders"}}}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "db", Labels: map[string]string{batonv1.LabelCassandraSecret: "true"}},
		Data: map[string][]byte{"username": []byte("tenant_shop"), "password": []byte("shop-s3cret")}}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(dl, secret).Build()
	cfg := inject.Config{Image: "baton:test"}
	cfg.Cassandra.ContactPoints, cfg.Cassandra.Keyspace = []string{"cass-0.db"}, "baton"
	policy := &controllers.PoolSource{Secrets: c, Config: cfg, Defaults: cassandrastore.Credentials{Username: "baton-operator", Password: "operator-s3cret"}}
	injector, err := webhook.NewPodInjector(c, cfg, webhook.WithConnectionPolicy(policy.Refuses))
	if err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "worker", Annotations: map[string]string{batonv1.AnnotationLock: "orders"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}}}
	raw, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	req := admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{UID: "uid-1", Operation: admissionv1.Create, Namespace: "shop",
		Name: pod.Name, Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}, Object: runtime.RawExtension{Raw: raw}}}

	resp := injector.Handle(context.Background(), req)
	if resp.Allowed || resp.Result == nil || !strings.Contains(resp.Result.Message, "no Cassandra credentials") ||
		!strings.Contains(resp.Result.Message, "credentialsSecretRef") {
		t.Fatalf("a pod of a lock without credentials: allowed %v, result %+v; want a denial that says to name credentials", resp.Allowed, resp.Result)
	}

	dl.Spec.Cassandra = &batonv1.CassandraConnection{CredentialsSecretRef: &batonv1.CredentialsSecretRef{Name: "db"}}
	if err := c.Update(context.Background(), dl); err != nil {
		t.Fatal(err)
	}
	resp = injector.Handle(context.Background(), req)
	if !resp.Allowed || len(resp.Patches) == 0 {
		t.Fatalf("a pod of a lock with a labelled Secret: allowed %v, %d patches, result %+v; want it injected", resp.Allowed, len(resp.Patches), resp.Result)
	}
	if !strings.Contains(func() string { b, _ := json.Marshal(resp.Patches); return string(b) }(), `"secretName":"db"`) {
		t.Error("the injected pod does not mount the lock's Secret db")
	}
}
