package webhook_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	batonv1 "github.com/baton-dev/baton/api/v1"
	"github.com/baton-dev/baton/internal/inject"
	"github.com/baton-dev/baton/internal/webhook"
)

// reader serves one DistributedLock, or an error, without an API server.
type reader struct {
	lock *batonv1.DistributedLock
	err  error
	gets []client.ObjectKey
}

func (r *reader) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	r.gets = append(r.gets, key)
	if r.err != nil {
		return r.err
	}
	if r.lock == nil || r.lock.Namespace != key.Namespace || r.lock.Name != key.Name {
		return apierrors.NewNotFound(schema.GroupResource{Group: "baton.dev", Resource: "distributedlocks"}, key.Name)
	}
	r.lock.DeepCopyInto(obj.(*batonv1.DistributedLock))
	return nil
}

func (r *reader) List(context.Context, client.ObjectList, ...client.ListOption) error {
	return errors.New("not implemented")
}

func lockIn(ns, name string, ids ...string) *batonv1.DistributedLock {
	dl := &batonv1.DistributedLock{Spec: batonv1.DistributedLockSpec{LockIDs: ids}}
	dl.Namespace, dl.Name = ns, name
	return dl
}

func request(t *testing.T, op admissionv1.Operation, ns string, pod *corev1.Pod) admission.Request {
	t.Helper()
	raw, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	return admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		UID: "uid-1", Operation: op, Namespace: ns, Name: pod.Name,
		Kind:   metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
		Object: runtime.RawExtension{Raw: raw},
	}}
}

func newInjector(t *testing.T, r *reader) *webhook.PodInjector {
	t.Helper()
	p, err := webhook.NewPodInjector(r, testConfig())
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestNewPodInjectorValidates(t *testing.T) {
	if _, err := webhook.NewPodInjector(nil, testConfig()); err == nil {
		t.Error("nil client accepted")
	}
	_, err := webhook.NewPodInjector(&reader{}, inject.Config{})
	if !errors.Is(err, inject.ErrInvalidConfig) {
		t.Errorf("empty config: err = %v, want ErrInvalidConfig", err)
	}
}

func TestHandle(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name    string
		r       *reader
		op      admissionv1.Operation
		pod     *corev1.Pod
		allowed bool
		code    int32  // of the result, when one is expected
		msg     string // substring of the result message
		patched bool
	}{
		{name: "injected", r: &reader{lock: lockIn("shop", "orders", "orders")}, pod: annotatedPod("w", "orders"),
			allowed: true, patched: true}, // PatchResponseFromRaw sets no result
		{name: "no annotation", r: &reader{}, pod: plainPod("w"), allowed: true, code: http.StatusOK,
			msg: "no " + batonv1.AnnotationLock},
		{name: "marked", r: &reader{lock: lockIn("shop", "orders", "orders")}, pod: marked(annotatedPod("w", "orders")),
			code: http.StatusForbidden, msg: "only baton's webhook sets"},
		{name: "marked without lock annotation", r: &reader{}, pod: marked(plainPod("w")),
			code: http.StatusForbidden, msg: "only baton's webhook sets"},
		{name: "own sidecar container", r: &reader{lock: lockIn("shop", "orders", "orders")}, pod: withSidecar(annotatedPod("w", "orders")),
			code: http.StatusForbidden, msg: "conflicts with the baton sidecar"},
		{name: "delete ignored", r: &reader{}, op: admissionv1.Delete, pod: annotatedPod("w", "orders"), allowed: true,
			code: http.StatusOK},
		{name: "missing lock", r: &reader{}, pod: annotatedPod("w", "ghost"), code: http.StatusForbidden,
			msg: inject.MissingLockError("shop", "ghost").Error()},
		{name: "read error", r: &reader{err: errors.New("etcd on fire")}, pod: annotatedPod("w", "orders"),
			code: http.StatusInternalServerError, msg: "etcd on fire"},
		{name: "lock cannot be injected", r: &reader{lock: lockIn("shop", "orders")}, pod: annotatedPod("w", "orders"),
			code: http.StatusForbidden, msg: "invalid DistributedLock"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			op := tc.op
			if op == "" {
				op = admissionv1.Create
			}
			resp := newInjector(t, tc.r).Handle(ctx, request(t, op, "shop", tc.pod))
			if resp.Allowed != tc.allowed {
				t.Errorf("allowed = %v, want %v (result %+v)", resp.Allowed, tc.allowed, resp.Result)
			}
			if tc.code != 0 && (resp.Result == nil || resp.Result.Code != tc.code) {
				t.Errorf("result = %+v, want code %d", resp.Result, tc.code)
			}
			if tc.msg != "" && (resp.Result == nil || !strings.Contains(resp.Result.Message, tc.msg)) {
				t.Errorf("result = %+v, want message containing %q", resp.Result, tc.msg)
			}
			if got := len(resp.Patches) > 0; got != tc.patched {
				t.Errorf("patches = %v, want patched=%v", resp.Patches, tc.patched)
			}
		})
	}
}

// marked is pod with the label baton.dev/injected its author set.
func marked(pod *corev1.Pod) *corev1.Pod {
	pod.Labels = map[string]string{batonv1.LabelInjected: "true"}
	return pod
}

// withSidecar is pod with a container of the sidecar's name its author wrote.
func withSidecar(pod *corev1.Pod) *corev1.Pod {
	pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{Name: inject.ContainerName, Image: "baton"})
	return pod
}

// TestHandleUpdate: an update is denied when it adds, changes or removes an injection marker, and
// allowed otherwise; the lock is never read.
func TestHandleUpdate(t *testing.T) {
	injected := func(mutate func(p *corev1.Pod)) *corev1.Pod {
		p := annotatedPod("w", "orders")
		p.Annotations[batonv1.AnnotationInjected] = "img"
		p.Labels = map[string]string{batonv1.LabelInjected: "true", "app": "w"}
		if mutate != nil {
			mutate(p)
		}
		return p
	}
	for _, tc := range []struct {
		name     string
		old, new *corev1.Pod
		allowed  bool
	}{
		{"other label", injected(nil), injected(func(p *corev1.Pod) { p.Labels["baton.dev/role"] = "holder" }), true},
		{"label added", plainPod("w"), marked(plainPod("w")), false},
		{"annotation added", annotatedPod("w", "orders"), injected(func(p *corev1.Pod) { p.Labels = nil }), false},
		{"label changed", injected(nil), injected(func(p *corev1.Pod) { p.Labels[batonv1.LabelInjected] = "false" }), false},
		{"annotation changed", injected(nil), injected(func(p *corev1.Pod) { p.Annotations[batonv1.AnnotationInjected] = "other" }), false},
		{"label emptied", injected(nil), injected(func(p *corev1.Pod) { p.Labels[batonv1.LabelInjected] = "" }), false},
		{"label removed", injected(nil), injected(func(p *corev1.Pod) { delete(p.Labels, batonv1.LabelInjected) }), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &reader{}
			req := request(t, admissionv1.Update, "shop", tc.new)
			oldRaw, err := json.Marshal(tc.old)
			if err != nil {
				t.Fatal(err)
			}
			req.OldObject = runtime.RawExtension{Raw: oldRaw}
			resp := newInjector(t, r).Handle(context.Background(), req)
			if resp.Allowed != tc.allowed || len(resp.Patches) != 0 || len(r.gets) != 0 {
				t.Errorf("allowed = %v (result %+v), patches %v, lock reads %v; want allowed = %v, no patch, no read",
					resp.Allowed, resp.Result, resp.Patches, r.gets, tc.allowed)
			}
			if !tc.allowed && (resp.Result == nil || resp.Result.Code != http.StatusForbidden || !strings.Contains(resp.Result.Message, "cannot be added, changed or removed")) {
				t.Errorf("result = %+v, want a denial naming the markers", resp.Result)
			}
		})
	}
}

// The lock is looked up in the request's namespace: a pod's own namespace may be empty.
func TestHandleUsesRequestNamespace(t *testing.T) {
	r := &reader{lock: lockIn("shop", "orders", "orders")}
	pod := annotatedPod("w", "orders")
	resp := newInjector(t, r).Handle(context.Background(), request(t, admissionv1.Create, "shop", pod))
	if !resp.Allowed || len(r.gets) != 1 || r.gets[0] != (client.ObjectKey{Namespace: "shop", Name: "orders"}) {
		t.Fatalf("allowed=%v gets=%v", resp.Allowed, r.gets)
	}
	var paths []string
	for _, p := range resp.Patches {
		paths = append(paths, p.Operation+" "+p.Path)
	}
	joined := strings.Join(paths, "\n")
	for _, want := range []string{"add /spec/initContainers", "add /spec/volumes", "add /spec/readinessGates"} {
		if !strings.Contains(joined, want) {
			t.Errorf("patch lacks %q:\n%s", want, joined)
		}
	}
	if strings.Contains(joined, "/metadata/namespace") {
		t.Errorf("patch sets the namespace:\n%s", joined)
	}
}

func TestMutatingWebhookConfiguration(t *testing.T) {
	ca := []byte("ca")
	for _, mwc := range []*admissionregistrationv1.MutatingWebhookConfiguration{
		webhook.MutatingWebhookConfiguration("baton", "baton-system", "baton-webhook", webhook.Path, ca),
		webhook.MutatingWebhookConfigurationForURL("baton", "https://127.0.0.1:9443"+webhook.Path, ca),
	} {
		if mwc.Name != "baton" || len(mwc.Webhooks) != 1 {
			t.Fatalf("configuration = %+v", mwc)
		}
		w := mwc.Webhooks[0]
		if *w.FailurePolicy != admissionregistrationv1.Fail || *w.SideEffects != admissionregistrationv1.SideEffectClassNone ||
			*w.ReinvocationPolicy != admissionregistrationv1.NeverReinvocationPolicy || *w.TimeoutSeconds != 5 ||
			len(w.AdmissionReviewVersions) != 1 || w.AdmissionReviewVersions[0] != "v1" {
			t.Errorf("webhook settings = %+v", w)
		}
		if len(w.Rules) != 1 || len(w.Rules[0].Operations) != 2 || w.Rules[0].Operations[0] != admissionregistrationv1.Create ||
			w.Rules[0].Operations[1] != admissionregistrationv1.Update ||
			strings.Join(w.Rules[0].Resources, ",") != "pods,pods/status,pods/ephemeralcontainers,pods/resize" || w.Rules[0].APIGroups[0] != "" {
			t.Errorf("rules = %+v", w.Rules)
		}
		// What the condition selects is tested against the API server (webhook_test.go); here,
		// that it names package inject's keys.
		if len(w.MatchConditions) != 1 || w.MatchConditions[0].Name != webhook.MatchConditionName {
			t.Errorf("matchConditions = %+v", w.MatchConditions)
		}
		for _, key := range []string{batonv1.AnnotationLock, batonv1.AnnotationInjected, batonv1.LabelInjected} {
			if !strings.Contains(w.MatchConditions[0].Expression, "'"+key+"' in object.metadata.") {
				t.Errorf("match condition does not look for %s: %s", key, w.MatchConditions[0].Expression)
			}
		}
		if string(w.ClientConfig.CABundle) != "ca" {
			t.Errorf("caBundle = %q", w.ClientConfig.CABundle)
		}
	}
}

// A lock missing from the cache is confirmed by the live reader before the pod is denied: a lock
// created moments before its pods may not have reached the cache yet.
func TestHandleConfirmsMissingLockLive(t *testing.T) {
	cache, live := &reader{}, &reader{lock: lockIn("shop", "orders", "orders")}
	p, err := webhook.NewPodInjector(cache, testConfig(), webhook.WithLiveReader(live))
	if err != nil {
		t.Fatal(err)
	}
	resp := p.Handle(context.Background(), request(t, admissionv1.Create, "shop", annotatedPod("w", "orders")))
	if !resp.Allowed || len(resp.Patches) == 0 || len(live.gets) != 1 {
		t.Fatalf("allowed=%v patches=%d live gets=%v, want an injected pod after one live read", resp.Allowed, len(resp.Patches), live.gets)
	}
	live.lock = nil
	resp = p.Handle(context.Background(), request(t, admissionv1.Create, "shop", annotatedPod("w", "orders")))
	if resp.Allowed || !strings.Contains(resp.Result.Message, "shop/orders") {
		t.Errorf("missing everywhere: allowed=%v result=%+v", resp.Allowed, resp.Result)
	}
	cache.lock = lockIn("shop", "orders", "orders")
	cache.lock.Status.CassandraClusterName = "prod"
	p.Handle(context.Background(), request(t, admissionv1.Create, "shop", annotatedPod("w", "orders")))
	if len(live.gets) != 2 {
		t.Errorf("the live reader was asked although the cache had the lock and its cluster: %v", live.gets)
	}
}

// The Cassandra cluster the operator recorded for the lock reaches the sidecar; a cached lock
// without one (its first status may not be cached yet) is read live once more.
func TestHandleInjectsRecordedCluster(t *testing.T) {
	cached, recorded := lockIn("shop", "orders", "orders"), lockIn("shop", "orders", "orders")
	recorded.Status.CassandraClusterName = "prod-eu"
	cache, live := &reader{lock: cached}, &reader{lock: recorded}
	p, err := webhook.NewPodInjector(cache, testConfig(), webhook.WithLiveReader(live))
	if err != nil {
		t.Fatal(err)
	}
	resp := p.Handle(context.Background(), request(t, admissionv1.Create, "shop", annotatedPod("w", "orders")))
	if !resp.Allowed || len(live.gets) != 1 {
		t.Fatalf("allowed=%v live gets=%v", resp.Allowed, live.gets)
	}
	raw, err := json.Marshal(resp.Patches)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(raw), `"name":"BATON_CASSANDRA_CLUSTER_NAME","value":"prod-eu"`) {
		t.Errorf("the sidecar does not get the recorded cluster:\n%s", raw)
	}

	// The live reader failing leaves the cached copy: the pod is still admitted, without a check.
	live.err = errors.New("API server slow")
	resp = p.Handle(context.Background(), request(t, admissionv1.Create, "shop", annotatedPod("w", "orders")))
	if raw, _ := json.Marshal(resp.Patches); !resp.Allowed || strings.Contains(string(raw), "BATON_CASSANDRA_CLUSTER_NAME") {
		t.Errorf("allowed=%v patches %s", resp.Allowed, raw)
	}
}
