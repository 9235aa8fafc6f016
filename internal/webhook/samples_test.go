package webhook_test

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	batonv1 "github.com/baton-dev/baton/api/v1"
	"github.com/baton-dev/baton/controllers"
	"github.com/baton-dev/baton/internal/inject"
	"github.com/baton-dev/baton/internal/sidecarcontract"
	"github.com/baton-dev/baton/lock/cassandrastore"
)

// samplesDir holds the samples users apply with kubectl apply -k config/samples.
var samplesDir = filepath.Join("..", "..", "config", "samples")

// samplesNamespace is where TestSamplesAreAdmitted applies the samples: the one namespace the test
// webhook allows scope Global in (testConfig), as global-lock.yaml asks of the operator.
const samplesNamespace = "baton-samples"

// workload is a sample that creates pods, with the template they are made from.
type workload struct {
	kind, name string
	template   corev1.PodTemplateSpec
}

// pod is a pod as the workload's controller would create it in ns, before admission.
func (w workload) pod(ns string) *corev1.Pod {
	tpl := w.template.DeepCopy()
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: w.name + "-", Namespace: ns, Labels: tpl.Labels, Annotations: tpl.Annotations,
		},
		Spec: tpl.Spec,
	}
}

// sampleSet is config/samples as kubectl kustomize builds it.
type sampleSet struct {
	objects     []client.Object
	locks       []*batonv1.DistributedLock
	deployments []appsv1.Deployment
	workloads   []workload
}

// TestSamplesAreAdmitted applies config/samples as a user would (kubectl apply -k, server-side
// dry run) against the real CRD on a real kube-apiserver, then dry-runs, through the real webhook,
// a pod built from each workload's pod template and a pod of each DistributedLock, and checks that
// each was injected as its lock says. A Deployment or CronJob dry run creates no pods, so without
// the pods the webhook would never see the samples. It also checks that the samples still show
// what the docs promise (a Blocking ReadinessGate lock with a Deployment, a Try lock, a Label lock,
// a singleton CronJob, a Global lock), that the Deployments' rollouts would not stall, and that
// the Global lock's pods are refused outside the allow-listed namespace.
//
// Not covered: no kubelet or operator runs here, so the samples' images (busybox) are not pulled
// or run and no lock is taken; the operator's connection policy is asked directly, for an operator
// with its own Cassandra credentials and the chart's default policy.
func TestSamplesAreAdmitted(t *testing.T) {
	c, cs, _, elsewhere := setup(t) // elsewhere: a fresh namespace, not allowed scope Global
	ctx := ctxT(t)
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: samplesNamespace}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	checkKustomizationListsEveryFile(t)
	s := buildSamples(t)
	checkCoverage(t, s)

	// 1. Every sample, as kubectl apply -k sends it, validated by the API server (the CRD's schema
	// and rules, the built-in types' validation, no unknown fields) and stored nowhere.
	out, err := kubectl(t, "apply", "-k", samplesDir, "-n", samplesNamespace, "--dry-run=server", "--validate=strict")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if n := strings.Count(out, "(server dry run)"); n != len(s.objects) {
		t.Errorf("kubectl apply -k reported %d objects, the samples have %d:\n%s", n, len(s.objects), out)
	}

	// 2. The locks for real, so that the webhook finds them (a dry-run object is not stored), each
	// with a connection the operator's policy allows (its own webhook asks the policy too). The
	// samples name no credentials Secret (a tenant's Secret is theirs to make), so the policy is
	// that of a development Cassandra without authentication, as make demo runs.
	policy := &controllers.PoolSource{Secrets: c, Config: testConfig(), Defaults: cassandrastore.Credentials{Username: "baton", Password: "operator"},
		AllowAnonymous: true}
	for _, dl := range s.locks {
		if err := policy.Refuses(ctx, createSampleLock(t, c, dl, samplesNamespace)); err != nil {
			t.Errorf("DistributedLock %s: the operator (own credentials, default policy) refuses its connection: %v", dl.Name, err)
		}
	}

	// 3. The pods, each admitted and injected as its lock says.
	for _, w := range s.workloads {
		pod := admit(t, cs, w.pod(samplesNamespace))
		if pod != nil {
			checkInjected(t, w.kind+" "+w.name, pod, lockNamed(s, pod.Annotations[batonv1.AnnotationLock]))
		}
	}
	for _, dl := range s.locks {
		pod := admit(t, cs, lockPod(dl.Name, samplesNamespace))
		if pod != nil {
			checkInjected(t, "a pod of DistributedLock "+dl.Name, pod, dl)
		}
	}

	// 4. Rollouts of the sample Deployments do not stall (the RolloutSafe condition's check). The
	// samples share one namespace (none, as built: kubectl apply -n sets it).
	for _, dl := range s.locks {
		for _, p := range controllers.RolloutProblems(dl, s.deployments, nil) {
			t.Errorf("DistributedLock %s: %s", dl.Name, p)
		}
	}

	// 5. The Global lock where scope Global is not allowed: its pods are refused.
	for _, dl := range s.locks {
		if dl.Spec.Scope != batonv1.ScopeGlobal {
			continue
		}
		_ = createSampleLock(t, c, dl, elsewhere)
		_, err := cs.CoreV1().Pods(elsewhere).Create(ctx, lockPod(dl.Name, elsewhere), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err == nil || !strings.Contains(err.Error(), "scope Global is not allowed") {
			t.Errorf("a pod of Global DistributedLock %s in namespace %s (not allow-listed): err = %v, want refused for scope Global", dl.Name, elsewhere, err)
		}
	}
}

// checkKustomizationListsEveryFile fails the test when a YAML file in config/samples is not a
// resource of its kustomization (kubectl apply -k would leave it out) or a listed one is missing.
func checkKustomizationListsEveryFile(t *testing.T) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(samplesDir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k struct {
		Resources []string `json:"resources"`
	}
	if err := yaml.Unmarshal(raw, &k); err != nil {
		t.Fatalf("kustomization.yaml: %v", err)
	}
	files, err := filepath.Glob(filepath.Join(samplesDir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var have []string
	for _, f := range files {
		if base := filepath.Base(f); base != "kustomization.yaml" {
			have = append(have, base)
		}
	}
	listed := slices.Sorted(slices.Values(k.Resources))
	if !slices.Equal(have, listed) {
		t.Errorf("config/samples holds %v but kustomization.yaml lists %v: list every sample", have, listed)
	}
}

// buildSamples runs kubectl kustomize on config/samples and decodes what it prints, strictly (an
// unknown field is an error).
func buildSamples(t *testing.T) sampleSet {
	t.Helper()
	out, err := kubectl(t, "kustomize", samplesDir)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := batonv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	decoder := serializer.NewCodecFactory(scheme, serializer.EnableStrict).UniversalDeserializer()
	var s sampleSet
	docs := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(out)))
	for {
		doc, err := docs.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("reading kubectl kustomize's output: %v", err)
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		obj, gvk, err := decoder.Decode(doc, nil, nil)
		if err != nil {
			t.Fatalf("decoding a sample: %v\n%s", err, doc)
		}
		s.objects = append(s.objects, obj.(client.Object))
		switch o := obj.(type) {
		case *batonv1.DistributedLock:
			s.locks = append(s.locks, o)
		case *appsv1.Deployment:
			s.deployments = append(s.deployments, *o)
			s.workloads = append(s.workloads, workload{"Deployment", o.Name, o.Spec.Template})
		case *appsv1.StatefulSet:
			s.workloads = append(s.workloads, workload{"StatefulSet", o.Name, o.Spec.Template})
		case *appsv1.DaemonSet:
			s.workloads = append(s.workloads, workload{"DaemonSet", o.Name, o.Spec.Template})
		case *batchv1.Job:
			s.workloads = append(s.workloads, workload{"Job", o.Name, o.Spec.Template})
		case *batchv1.CronJob:
			s.workloads = append(s.workloads, workload{"CronJob", o.Name, o.Spec.JobTemplate.Spec.Template})
		case *corev1.Service, *corev1.ConfigMap:
		default:
			// A kind this test does not know could hold a pod template it would not check.
			t.Fatalf("sample %s %s: this test does not know the kind; teach it whether it makes pods", gvk.Kind, o.(client.Object).GetName())
		}
	}
	if len(s.objects) == 0 {
		t.Fatal("kubectl kustomize config/samples built nothing")
	}
	return s
}

// checkCoverage fails the test when the samples no longer show one of the uses the docs point
// them to.
func checkCoverage(t *testing.T, s sampleSet) {
	t.Helper()
	usedBy := func(dl *batonv1.DistributedLock, kind string) bool {
		return slices.ContainsFunc(s.workloads, func(w workload) bool {
			return w.kind == kind && w.template.Annotations[batonv1.AnnotationLock] == dl.Name
		})
	}
	want := map[string]func(*batonv1.DistributedLock) bool{
		"a Blocking lock with the ReadinessGate traffic policy used by a Deployment": func(dl *batonv1.DistributedLock) bool {
			return mode(dl) == batonv1.ModeBlocking && traffic(dl) == batonv1.TrafficReadinessGate && usedBy(dl, "Deployment")
		},
		"a Try-mode lock":                      func(dl *batonv1.DistributedLock) bool { return mode(dl) == batonv1.ModeTry },
		"a lock with the Label traffic policy": func(dl *batonv1.DistributedLock) bool { return traffic(dl) == batonv1.TrafficLabel },
		"a lock used by a CronJob":             func(dl *batonv1.DistributedLock) bool { return usedBy(dl, "CronJob") },
		"a Global lock":                        func(dl *batonv1.DistributedLock) bool { return dl.Spec.Scope == batonv1.ScopeGlobal },
	}
	for what, ok := range want {
		if !slices.ContainsFunc(s.locks, ok) {
			t.Errorf("config/samples lacks %s", what)
		}
	}
}

func mode(dl *batonv1.DistributedLock) batonv1.LockMode {
	return cmp.Or(dl.Spec.Mode, batonv1.ModeBlocking)
}

func traffic(dl *batonv1.DistributedLock) batonv1.TrafficPolicy {
	return cmp.Or(dl.Spec.TrafficPolicy, batonv1.TrafficReadinessGate)
}

// createSampleLock creates a copy of dl in ns, returns it, and deletes it when the test ends (no
// operator runs here, so no finalizer holds it).
func createSampleLock(t *testing.T, c client.Client, dl *batonv1.DistributedLock, ns string) *batonv1.DistributedLock {
	t.Helper()
	obj := dl.DeepCopy()
	obj.Namespace = ns
	if err := c.Create(ctxT(t), obj); err != nil {
		t.Fatalf("create DistributedLock %s/%s: %v", ns, obj.Name, err)
	}
	t.Cleanup(func() {
		if err := c.Delete(context.Background(), obj); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete DistributedLock %s/%s: %v", ns, obj.Name, err)
		}
	})
	return obj
}

// lockPod is a minimal pod in ns that asks for the sidecar of the DistributedLock lock.
func lockPod(lock, ns string) *corev1.Pod {
	p := annotatedPod("", lock)
	p.GenerateName, p.Namespace = lock+"-", ns
	return p
}

// lockNamed returns the sample DistributedLock called name, or nil.
func lockNamed(s sampleSet, name string) *batonv1.DistributedLock {
	for _, dl := range s.locks {
		if dl.Name == name {
			return dl
		}
	}
	return nil
}

// admit dry-runs the creation of pod and returns it as admitted (mutated by the webhook), or nil
// after reporting why it was refused.
func admit(t *testing.T, cs kubernetes.Interface, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	got, err := cs.CoreV1().Pods(pod.Namespace).Create(ctxT(t), pod, metav1.CreateOptions{
		DryRun: []string{metav1.DryRunAll}, FieldValidation: metav1.FieldValidationStrict,
	})
	if err != nil {
		t.Errorf("pod %s (annotation %s=%q) refused: %v", pod.GenerateName, batonv1.AnnotationLock, pod.Annotations[batonv1.AnnotationLock], err)
		return nil
	}
	return got
}

// checkInjected checks that pod (what names it) got the sidecar of dl and what dl's mode and
// traffic policy add.
func checkInjected(t *testing.T, what string, pod *corev1.Pod, dl *batonv1.DistributedLock) {
	t.Helper()
	if dl == nil {
		t.Errorf("%s: annotation %s=%q names no sample DistributedLock", what, batonv1.AnnotationLock, pod.Annotations[batonv1.AnnotationLock])
		return
	}
	if !inject.Injected(pod) {
		t.Errorf("%s: admitted without the sidecar: labels %v, annotations %v", what, pod.Labels, pod.Annotations)
		return
	}
	i := slices.IndexFunc(pod.Spec.InitContainers, func(c corev1.Container) bool { return c.Name == inject.ContainerName })
	if i < 0 {
		t.Errorf("%s: no native sidecar %q among the init containers", what, inject.ContainerName)
		return
	}
	if blocking := mode(dl) == batonv1.ModeBlocking; (pod.Spec.InitContainers[i].StartupProbe != nil) != blocking {
		t.Errorf("%s: sidecar startup probe %v, want one exactly in Blocking mode (mode %s)", what, pod.Spec.InitContainers[i].StartupProbe, mode(dl))
	}
	gate := slices.ContainsFunc(pod.Spec.ReadinessGates, func(g corev1.PodReadinessGate) bool {
		return g.ConditionType == batonv1.ConditionLockHeld
	})
	if gate != (traffic(dl) == batonv1.TrafficReadinessGate) {
		t.Errorf("%s: readiness gates %v under traffic policy %s", what, pod.Spec.ReadinessGates, traffic(dl))
	}
	role, labelled := pod.Labels[batonv1.LabelRole]
	if wantLabel := traffic(dl) == batonv1.TrafficLabel; labelled != wantLabel || (wantLabel && role != batonv1.RoleStandby) {
		t.Errorf("%s: label %s=%q under traffic policy %s", what, batonv1.LabelRole, role, traffic(dl))
	}
	for _, c := range pod.Spec.Containers {
		if !slices.Contains(c.Env, corev1.EnvVar{Name: sidecarcontract.EnvLocks, Value: strings.Join(dl.Spec.LockIDs, ",")}) {
			t.Errorf("%s: container %s lacks %s=%s", what, c.Name, sidecarcontract.EnvLocks, strings.Join(dl.Spec.LockIDs, ","))
		}
	}
	t.Logf("%s: admitted with the sidecar of %s (mode %s, traffic policy %s, readiness gates %v, labels %v)",
		what, dl.Name, mode(dl), traffic(dl), pod.Spec.ReadinessGates, pod.Labels)
}
