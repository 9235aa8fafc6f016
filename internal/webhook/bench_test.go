package webhook_test

import (
	"context"
	"encoding/json"
	"math"
	"slices"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	batonv1 "github.com/baton-dev/baton/api/v1"
	"github.com/baton-dev/baton/internal/webhook"
)

// Benchmarks of admission latency against the target in docs/design.md (webhook admission p99 ≤ 20 ms); results in
// docs/benchmarks.md. Run them with
//
//	go test -run '^$' -bench . -benchtime 1000x ./internal/webhook/
//
// Each reports the median and 99th percentile of its per-operation durations in milliseconds.

// BenchmarkHandle measures PodInjector.Handle alone on the admission of a two-container
// Deployment pod: decoding, policy, reading the DistributedLock, injecting and diffing into a JSON
// patch. The lock is read through a controller-runtime fake client (an in-memory object tracker),
// standing in for the operator's cached client; no HTTP, TLS or API server is involved.
func BenchmarkHandle(b *testing.B) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		b.Fatal(err)
	}
	if err := batonv1.AddToScheme(scheme); err != nil {
		b.Fatal(err)
	}
	dl := benchLock("shop")
	reader := fake.NewClientBuilder().WithScheme(scheme).WithObjects(dl).Build()
	p, err := webhook.NewPodInjector(reader, testConfig())
	if err != nil {
		b.Fatal(err)
	}
	pod := deploymentPod("orders-7d9f8b6c5d-x2x4q", dl.Name)
	pod.Namespace = "shop"
	raw, err := json.Marshal(pod)
	if err != nil {
		b.Fatal(err)
	}
	req := admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		UID: "uid-bench", Operation: admissionv1.Create, Namespace: pod.Namespace, Name: pod.Name,
		Kind:     metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
		Resource: metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
		Object:   runtime.RawExtension{Raw: raw},
	}}
	ctx := context.Background()
	// The measured path is the injecting one.
	if resp := p.Handle(ctx, req); !resp.Allowed || len(resp.Patches) == 0 {
		b.Fatalf("not injected: allowed=%v result=%+v patches=%d", resp.Allowed, resp.Result, len(resp.Patches))
	}

	d := make([]time.Duration, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		start := time.Now()
		resp := p.Handle(ctx, req)
		d[i] = time.Since(start)
		if !resp.Allowed {
			b.Fatalf("denied: %+v", resp.Result)
		}
	}
	b.StopTimer()
	reportPercentiles(b, "", d)
}

// BenchmarkAdmission measures pod creation through the test binary's kube-apiserver and webhook
// server (see setup): the round trip of a client's create, with the webhook (annotated pod) and
// without it (the same pod without the annotation, which the configuration's matchConditions keep
// away from the webhook). Creates are dry-run (dryRun=All), so nothing is stored; the webhook is
// still called because it declares sideEffects None, which the benchmark verifies by counting
// the calls and checking that every annotated pod comes back injected.
//
// It reports p50/p99 of both kinds ("webhook-", "plain-") and their difference ("share-"), the
// webhook's part of an admission. The two kinds alternate, so both see the same machine. The
// figures are an upper bound of what the operator's webhook adds: the test webhook reads the
// DistributedLock from the API server on every call, where the operator reads its informer cache;
// "lockread-" is that read, timed from the benchmark through the same client after each pair.
func BenchmarkAdmission(b *testing.B) {
	c, cs, calls, ns := setup(b)
	ctx := context.Background()
	dl := benchLock(ns)
	if err := c.Create(ctx, dl); err != nil {
		b.Fatalf("create DistributedLock: %v", err)
	}
	injected := deploymentPod("bench-injected", dl.Name)
	plain := deploymentPod("bench-plain", "")
	dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}

	create := func(p *corev1.Pod) time.Duration {
		start := time.Now()
		got, err := cs.CoreV1().Pods(ns).Create(ctx, p, dryRun)
		d := time.Since(start)
		if err != nil {
			b.Fatalf("dry-run create %s: %v", p.Name, err)
		}
		if want := p == injected; hasSidecar(got) != want {
			b.Fatalf("dry-run create %s: sidecar injected = %v, want %v", p.Name, !want, want)
		}
		return d
	}
	// Warm up the connections (client to API server, API server to webhook) unmeasured.
	const warmup = 20
	for range warmup {
		create(injected)
		create(plain)
	}

	// The read the test webhook makes on every call, through the same client.
	key := client.ObjectKeyFromObject(dl)
	read := func() time.Duration {
		start := time.Now()
		err := c.Get(ctx, key, &batonv1.DistributedLock{})
		d := time.Since(start)
		if err != nil {
			b.Fatalf("get DistributedLock: %v", err)
		}
		return d
	}

	with, without, reads := make([]time.Duration, b.N), make([]time.Duration, b.N), make([]time.Duration, b.N)
	b.ResetTimer()
	for i := range b.N {
		if i%2 == 0 {
			with[i], without[i] = create(injected), create(plain)
		} else {
			without[i], with[i] = create(plain), create(injected)
		}
		reads[i] = read()
	}
	b.StopTimer()

	if n := calls.count(ns + "/" + injected.Name); n != warmup+b.N {
		b.Fatalf("webhook called %d times for %d dry-run creates of the annotated pod", n, warmup+b.N)
	}
	if n := calls.count(ns + "/" + plain.Name); n != 0 {
		b.Fatalf("webhook called %d times for the unannotated pod, want 0", n)
	}
	stored, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	if len(stored.Items) != 0 {
		b.Fatalf("%d pods stored by dry-run creates", len(stored.Items))
	}

	w50, w99 := reportPercentiles(b, "webhook-", with)
	p50, p99 := reportPercentiles(b, "plain-", without)
	b.ReportMetric(ms(w50-p50), "share-p50-ms")
	b.ReportMetric(ms(w99-p99), "share-p99-ms")
	reportPercentiles(b, "lockread-", reads)
	b.ReportMetric(0, "ns/op") // an iteration is one create of each kind: the mean says little
}

// benchLock is a DistributedLock with two lock IDs and the CRD's defaults spelled out.
func benchLock(ns string) *batonv1.DistributedLock {
	return &batonv1.DistributedLock{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "orders-leader"},
		Spec: batonv1.DistributedLockSpec{
			LockIDs:       []string{"orders-consumer", "orders-compactor"},
			Mode:          batonv1.ModeBlocking,
			LeaseDuration: &metav1.Duration{Duration: 15 * time.Second},
			TrafficPolicy: batonv1.TrafficReadinessGate,
			Scope:         batonv1.ScopeNamespace,
		},
	}
}

// deploymentPod is a pod as a ReplicaSet controller creates it for a Deployment (but with a fixed
// name, so that webhook calls can be counted): an app and a metrics exporter with ports, probes,
// resources and a configuration volume. An empty lock leaves out the baton.dev/lock annotation.
func deploymentPod(name, lock string) *corev1.Pod {
	resources := func(cpu, mem string) corev1.ResourceRequirements {
		return corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(mem)},
		}
	}
	httpGet := func(path string) *corev1.Probe {
		return &corev1.Probe{
			ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromString("http")}},
			PeriodSeconds: 10,
		}
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Labels:      map[string]string{"app": "orders-worker", "pod-template-hash": "7d9f8b6c5d"},
			Annotations: map[string]string{"prometheus.io/scrape": "true", "prometheus.io/port": "9100"},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "orders-worker-7d9f8b6c5d",
				UID: "5b0c8e1e-3c1a-4d7e-9a55-0f1d2c3b4a59", Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
			}},
		},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To[int64](30),
			SecurityContext:               &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](10001)},
			Containers: []corev1.Container{{
				Name:  "worker",
				Image: "registry.example.com/shop/orders-worker:1.4.2",
				Args:  []string{"--config=/etc/orders/config.yaml"},
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
				Env: []corev1.EnvVar{
					{Name: "LOG_LEVEL", Value: "info"},
					{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
				},
				Resources:      resources("250m", "256Mi"),
				ReadinessProbe: httpGet("/readyz"),
				LivenessProbe:  httpGet("/healthz"),
				VolumeMounts:   []corev1.VolumeMount{{Name: "config", MountPath: "/etc/orders", ReadOnly: true}},
			}, {
				Name:      "metrics",
				Image:     "registry.example.com/observability/exporter:0.9.1",
				Ports:     []corev1.ContainerPort{{Name: "metrics", ContainerPort: 9100}},
				Resources: resources("50m", "64Mi"),
			}},
			Volumes: []corev1.Volume{{
				Name:         "config",
				VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "orders-worker"}}},
			}},
		},
	}
	if lock != "" {
		p.Annotations[batonv1.AnnotationLock] = lock
	}
	return p
}

// reportPercentiles reports the median and the 99th percentile (nearest rank) of d in
// milliseconds, as prefix+"p50-ms" and prefix+"p99-ms", and returns them. It sorts d.
func reportPercentiles(b *testing.B, prefix string, d []time.Duration) (p50, p99 time.Duration) {
	b.Helper()
	if len(d) == 0 {
		return 0, 0
	}
	slices.Sort(d)
	rank := func(q float64) time.Duration {
		return d[max(0, int(math.Ceil(q*float64(len(d))))-1)]
	}
	p50, p99 = rank(0.50), rank(0.99)
	b.ReportMetric(ms(p50), prefix+"p50-ms")
	b.ReportMetric(ms(p99), prefix+"p99-ms")
	return p50, p99
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
