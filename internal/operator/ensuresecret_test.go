package operator

// Unit tests of ensureSecret on controller-runtime's in-memory fake client (no API server): the
// interceptor makes its Get fail the way a real API server does under load, and its Create answer
// Forbidden the way the chart's RBAC does (the chart ships the Secret and grants no create).

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

// fastBackoff keeps the retries of these tests in milliseconds.
var fastBackoff = wait.Backoff{Duration: time.Millisecond, Factor: 2, Steps: 1 << 30, Cap: 10 * time.Millisecond}

// chartSecret is the Secret as the chart ships it.
func chartSecret() *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "baton-system", Name: "baton-webhook-cert"}, Type: corev1.SecretTypeTLS}
}

// forbiddenCreate answers every Create as the chart's Role does: Forbidden.
func forbiddenCreate(creates *atomic.Int32) func(context.Context, client.WithWatch, client.Object, ...client.CreateOption) error {
	return func(_ context.Context, _ client.WithWatch, obj client.Object, _ ...client.CreateOption) error {
		creates.Add(1)
		return apierrors.NewForbidden(schema.GroupResource{Resource: "secrets"}, obj.GetName(),
			errors.New(`User "system:serviceaccount:baton-system:baton-operator" cannot create resource "secrets"`))
	}
}

func TestEnsureSecretRetriesATransientGet(t *testing.T) {
	var gets, creates atomic.Int32
	c := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithObjects(chartSecret()).
		WithInterceptorFuncs(interceptor.Funcs{
			Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
				if gets.Add(1) == 1 {
					return apierrors.NewServiceUnavailable("etcdserver: request timed out")
				}
				return c.Get(ctx, key, obj, opts...)
			},
			Create: forbiddenCreate(&creates),
		}).Build()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := ensureSecret(ctx, c, c, "baton-system", "baton-webhook-cert", fastBackoff, logr.Discard()); err != nil {
		t.Fatalf("one failed Get of the chart's Secret ended the operator: %v", err)
	}
	if g := gets.Load(); g != 2 {
		t.Errorf("%d Gets, want 2 (one failed, one found the Secret)", g)
	}
	if n := creates.Load(); n != 0 {
		t.Errorf("%d Creates of a Secret that exists, want 0", n)
	}
}

func TestEnsureSecretGetRetriesUntilTheContextEnds(t *testing.T) {
	var gets atomic.Int32
	c := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).
		WithInterceptorFuncs(interceptor.Funcs{
			Get: func(context.Context, client.WithWatch, client.ObjectKey, client.Object, ...client.GetOption) error {
				gets.Add(1)
				return apierrors.NewServiceUnavailable("etcdserver: request timed out")
			},
		}).Build()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		errc <- ensureSecret(ctx, c, c, "baton-system", "baton-webhook-cert", fastBackoff, logr.Discard())
	}()
	deadline := time.Now().Add(10 * time.Second)
	for gets.Load() < 3 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if g := gets.Load(); g < 3 {
		t.Fatalf("%d Gets in 10 s, want at least 3", g)
	}
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("ensureSecret after cancel: %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("ensureSecret did not return 10 s after its context ended")
	}
}

func TestEnsureSecretCreatesAMissingSecret(t *testing.T) {
	c := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).Build()
	if err := ensureSecret(context.Background(), c, c, "baton-system", "baton-webhook-cert", fastBackoff, logr.Discard()); err != nil {
		t.Fatal(err)
	}
	var s corev1.Secret
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "baton-system", Name: "baton-webhook-cert"}, &s); err != nil {
		t.Fatalf("the Secret was not created: %v", err)
	}
	if s.Type != corev1.SecretTypeTLS {
		t.Errorf("type %q, want %q", s.Type, corev1.SecretTypeTLS)
	}
}

func TestEnsureSecretForbiddenCreateLeavesItToTheChart(t *testing.T) {
	var creates atomic.Int32
	c := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).
		WithInterceptorFuncs(interceptor.Funcs{Create: forbiddenCreate(&creates)}).Build()
	var logged []string
	log := logr.New(&lineSink{lines: &logged})
	if err := ensureSecret(context.Background(), c, c, "baton-system", "baton-webhook-cert", fastBackoff, log); err != nil {
		t.Fatalf("a Forbidden Create of the Secret the chart owns ended the operator: %v", err)
	}
	if n := creates.Load(); n != 1 {
		t.Errorf("%d Creates, want 1", n)
	}
	if len(logged) != 1 || logged[0] != forbiddenCreateMessage {
		t.Errorf("logged %q, want one line %q", logged, forbiddenCreateMessage)
	}
}

// lineSink is a logr sink that keeps each message logged at level 0.
type lineSink struct{ lines *[]string }

func (s *lineSink) Init(logr.RuntimeInfo)               {}
func (s *lineSink) Enabled(level int) bool              { return level == 0 }
func (s *lineSink) Info(_ int, msg string, _ ...any)    { *s.lines = append(*s.lines, msg) }
func (s *lineSink) Error(_ error, msg string, _ ...any) { *s.lines = append(*s.lines, msg) }
func (s *lineSink) WithValues(...any) logr.LogSink      { return s }
func (s *lineSink) WithName(string) logr.LogSink        { return s }
