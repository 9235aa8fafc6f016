package inject_test

// The golden files: each testdata/<name>.yaml (a pod, and the DistributedLock it names unless the
// case is about a missing one) goes through the real admission handler, webhook.PodInjector, and
// what the API server would make of the answer is compared with testdata/<name>.yaml.injected.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/google/go-cmp/cmp"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
	"sigs.k8s.io/yaml"

	batonv1 "github.com/baton-dev/baton/api/v1"
	"github.com/baton-dev/baton/internal/inject"
	"github.com/baton-dev/baton/internal/webhook"
	"github.com/baton-dev/baton/lock/hintudp"
)

var update = flag.Bool("update", false, "rewrite the golden files testdata/*.yaml.injected")

const goldenSuffix = ".injected"

// testConfig is the operator configuration of the golden cases; a case whose name starts with
// "old-cluster" runs on a cluster without native sidecars.
func testConfig(name string) inject.Config {
	return inject.Config{
		Image: "ghcr.io/baton-dev/baton:v0.1.0",
		Cassandra: batonv1.CassandraConnection{
			ContactPoints: []string{"cassandra-0.cassandra.baton-system.svc:9042", "cassandra-1.cassandra.baton-system.svc:9042"},
		},
		NativeSidecars:   !strings.HasPrefix(name, "old-cluster"),
		GlobalNamespaces: []string{"reports"},
		HintPort:         hintPort(name),
		MetricsPort:      metricsPort(name),
	}
}

// metricsPort serves the sidecar's metrics on the pod's network for the case metrics-port only.
func metricsPort(name string) int32 {
	if name == "metrics-port" {
		return 9464
	}
	return 0
}

// hintPort is the operator's default hint port, and off for the old cluster's pods: both shapes
// of the sidecar are in the golden files.
func hintPort(name string) int32 {
	if strings.HasPrefix(name, "old-cluster") {
		return 0
	}
	return hintudp.DefaultPort
}

// testCase is one testdata/<name>.yaml: a pod and, unless the case is about a missing lock, the
// DistributedLock its annotation names.
type testCase struct {
	name string
	pod  *corev1.Pod
	dl   *batonv1.DistributedLock // nil: not in the file
}

func loadCases(t *testing.T) []testCase {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no test cases in testdata")
	}
	var cases []testCase
	for _, f := range files {
		cases = append(cases, loadCase(t, f))
	}
	return cases
}

func loadCase(t *testing.T, file string) testCase {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	c := testCase{name: strings.TrimSuffix(filepath.Base(file), ".yaml")}
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		switch tm.Kind {
		case "Pod":
			c.pod = &corev1.Pod{}
			err = yaml.UnmarshalStrict(doc, c.pod)
		case "DistributedLock":
			c.dl = &batonv1.DistributedLock{}
			err = yaml.UnmarshalStrict(doc, c.dl)
		default:
			err = fmt.Errorf("unexpected kind %q", tm.Kind)
		}
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
	}
	if c.pod == nil {
		t.Fatalf("%s: no Pod", file)
	}
	return c
}

// admit sends the case's pod through the webhook's real handler the way the API server does (an
// admission request with the pod as JSON; a fake API client that holds the case's
// DistributedLock), applies the JSON patch of the answer to the pod and renders the outcome: the
// injected pod, the unchanged pod after a comment with the reason it was not injected, or the
// reason it was denied.
func (c testCase) admit(t *testing.T) []byte {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := batonv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	locks := fake.NewClientBuilder().WithScheme(scheme)
	if c.dl != nil {
		locks = locks.WithObjects(c.dl.DeepCopy())
	}
	injector, err := webhook.NewPodInjector(locks.Build(), testConfig(c.name))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(c.pod)
	if err != nil {
		t.Fatal(err)
	}
	req := admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		UID: types.UID("golden-" + c.name), Operation: admissionv1.Create, Namespace: c.pod.Namespace, Name: c.pod.Name,
		Kind:     metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
		Resource: metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
		Object:   runtime.RawExtension{Raw: raw},
	}}
	resp := injector.Handle(context.Background(), req)
	// What the webhook server does before it answers: the patch operations become the bytes the
	// API server applies.
	if err := resp.Complete(req); err != nil {
		t.Fatal(err)
	}
	switch {
	case !resp.Allowed:
		if resp.Result.Code != http.StatusForbidden {
			t.Errorf("answered %d (%s), want a denial (403)", resp.Result.Code, resp.Result.Message)
		}
		return []byte("# error: " + resp.Result.Message + "\n")
	case resp.Patch == nil:
		return append([]byte("# not injected: "+resp.Result.Message+"\n"), marshal(t, c.pod)...)
	}
	patch, err := jsonpatch.DecodePatch(resp.Patch)
	if err != nil {
		t.Fatalf("the webhook's patch: %v\n%s", err, resp.Patch)
	}
	patched, err := patch.Apply(raw)
	if err != nil {
		t.Fatalf("applying the webhook's patch: %v\n%s", err, resp.Patch)
	}
	out := &corev1.Pod{}
	if err := yaml.UnmarshalStrict(patched, out); err != nil {
		t.Fatalf("the patched pod: %v\n%s", err, patched)
	}
	return marshal(t, out)
}

func marshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestGolden(t *testing.T) {
	for _, c := range loadCases(t) {
		t.Run(c.name, func(t *testing.T) {
			got := c.admit(t)
			golden := filepath.Join("testdata", c.name+".yaml"+goldenSuffix)
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if errors.Is(err, os.ErrNotExist) {
				t.Fatalf("%s has no golden file %s: run go test ./internal/inject/ -run TestGolden -update", c.name, golden)
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(string(want), string(got)); diff != "" {
				t.Errorf("%s differs from %s (run with -update to accept; -want +got):\n%s", c.name, golden, diff)
			}
		})
	}
}

// TestNoStaleGoldenFiles fails when a golden file no longer has an input case.
func TestNoStaleGoldenFiles(t *testing.T) {
	golden, err := filepath.Glob(filepath.Join("testdata", "*"+goldenSuffix))
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range golden {
		in := strings.TrimSuffix(g, goldenSuffix)
		if _, err := os.Stat(in); err != nil {
			t.Errorf("golden file %s has no input %s: delete it", g, in)
		}
	}
}
