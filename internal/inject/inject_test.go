package inject

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	batonv1 "github.com/baton-dev/baton/api/v1"
	"github.com/baton-dev/baton/internal/sidecarcontract"
	"github.com/baton-dev/baton/internal/testpki"
	"github.com/baton-dev/baton/sidecar"
)

var update = flag.Bool("update", false, "rewrite the golden files testdata/*.yaml.injected")

const goldenSuffix = ".injected"

// testConfig is the operator configuration of the golden cases; a case whose name starts with
// "old-cluster" runs on a cluster without native sidecars.
func testConfig(name string) Config {
	return Config{
		Image: "ghcr.io/baton-dev/baton:v0.1.0",
		Cassandra: batonv1.CassandraConnection{
			ContactPoints: []string{"cassandra-0.cassandra.baton-system.svc:9042", "cassandra-1.cassandra.baton-system.svc:9042"},
		},
		NativeSidecars:   !strings.HasPrefix(name, "old-cluster"),
		GlobalNamespaces: []string{"reports"},
	}
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

// lookup finds the DistributedLock the pod's annotation names, as the webhook does.
func (c testCase) lookup() (*batonv1.DistributedLock, error) {
	name := c.pod.Annotations[AnnotationLock]
	if c.dl == nil || c.dl.Name != name {
		return nil, MissingLockError(c.pod.Namespace, name)
	}
	return c.dl, nil
}

// run does what the webhook does and renders the outcome: the injected pod, the unchanged pod
// after a comment with the reason it was not injected, or the error.
func (c testCase) run(t *testing.T) []byte {
	t.Helper()
	if ok, reason := Required(c.pod); !ok {
		return append([]byte("# not injected: "+reason+"\n"), marshal(t, c.pod)...)
	}
	dl, err := c.lookup()
	if err == nil {
		var out *corev1.Pod
		if out, err = Inject(c.pod, dl, testConfig(c.name)); err == nil {
			return marshal(t, out)
		}
	}
	return []byte("# error: " + err.Error() + "\n")
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
			got := c.run(t)
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
			if !bytes.Equal(got, want) {
				t.Errorf("%s differs from %s (run with -update to accept):\n%s", c.name, golden, lineDiff(string(want), string(got)))
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

// lineDiff shows the first lines where want and got differ.
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	shown := 0
	for i := 0; i < max(len(w), len(g)) && shown < 10; i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			fmt.Fprintf(&b, "line %d:\n  want: %s\n  got:  %s\n", i+1, wl, gl)
			shown++
		}
	}
	return b.String()
}

// injected returns the output of every case that Inject accepts, by case.
func injected(t *testing.T) map[string]*corev1.Pod {
	t.Helper()
	out := map[string]*corev1.Pod{}
	for _, c := range loadCases(t) {
		if p := c.inject(); p != nil {
			out[c.name] = p
		}
	}
	if len(out) < 5 {
		t.Fatalf("only %d cases inject", len(out))
	}
	return out
}

// inject returns the injected pod, or nil when the case is not injected.
func (c testCase) inject() *corev1.Pod {
	if ok, _ := Required(c.pod); !ok {
		return nil
	}
	dl, err := c.lookup()
	if err != nil {
		return nil
	}
	p, err := Inject(c.pod, dl, testConfig(c.name))
	if err != nil {
		return nil
	}
	return p
}

func TestInjectDoesNotMutateInput(t *testing.T) {
	for _, c := range loadCases(t) {
		dl, err := c.lookup()
		if err != nil {
			continue
		}
		pod, dlBefore := c.pod.DeepCopy(), dl.DeepCopy()
		if _, err := Inject(c.pod, dl, testConfig(c.name)); err != nil {
			continue
		}
		if !reflect.DeepEqual(pod, c.pod) {
			t.Errorf("%s: Inject changed its input pod", c.name)
		}
		if !reflect.DeepEqual(dlBefore, dl) {
			t.Errorf("%s: Inject changed its DistributedLock", c.name)
		}
	}
}

func TestInjectedPodIsNotInjectedAgain(t *testing.T) {
	n := 0
	for _, c := range loadCases(t) {
		p := c.inject()
		if p == nil {
			continue
		}
		n++
		if ok, _ := Required(p); ok {
			t.Errorf("%s: Required says yes to the injected pod", c.name)
		}
		// Even without the annotation, the container marks the pod as injected.
		delete(p.Annotations, AnnotationInjected)
		if ok, _ := Required(p); ok {
			t.Errorf("%s: Required says yes to the injected pod without %s", c.name, AnnotationInjected)
		}
		if _, err := Inject(p, c.dl, testConfig(c.name)); !errors.Is(err, ErrConflict) {
			t.Errorf("%s: injecting an injected pod again: %v, want ErrConflict", c.name, err)
		}
	}
	if n == 0 {
		t.Fatal("no case injects")
	}
}

// sidecarEnvNames lists every environment variable the sidecar reads, from its usage text.
func sidecarEnvNames(t *testing.T) map[string]bool {
	t.Helper()
	var b bytes.Buffer
	sidecar.Usage(&b)
	names := map[string]bool{}
	for _, line := range strings.Split(b.String(), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && strings.HasPrefix(f[0], "--") {
			names[f[1]] = true
		}
	}
	if !names["BATON_LOCK_IDS"] || !names["POD_UID"] || len(names) < 20 {
		t.Fatalf("could not read the sidecar's variables from its usage text (got %v):\n%s", names, b.String())
	}
	return names
}

func sidecarOf(t *testing.T, p *corev1.Pod) *corev1.Container {
	t.Helper()
	for _, list := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for i := range list {
			if list[i].Name == ContainerName {
				return &list[i]
			}
		}
	}
	t.Fatalf("pod %s has no %s container", p.Name, ContainerName)
	return nil
}

func TestSidecarEnvNamesAreKnown(t *testing.T) {
	known := sidecarEnvNames(t)
	for name, p := range injected(t) {
		seen := map[string]bool{}
		for _, e := range sidecarOf(t, p).Env {
			if !known[e.Name] {
				t.Errorf("%s: sidecar env %s is not a variable the sidecar reads", name, e.Name)
			}
			if seen[e.Name] {
				t.Errorf("%s: sidecar env %s is set twice", name, e.Name)
			}
			seen[e.Name] = true
		}
	}
}

// TestSidecarAcceptsInjectedEnv runs the sidecar's own option parsing on the injected
// environment, with the downward API filled in and the Secret files created.
func TestSidecarAcceptsInjectedEnv(t *testing.T) {
	cases := map[string]testCase{}
	for _, c := range loadCases(t) {
		cases[c.name] = c
	}
	// What the mounted Secrets hold, by the variable that names the file.
	ca := testpki.NewCA(t)
	client := ca.Issue(t, "baton")
	secrets := map[string][]byte{sidecarcontract.TLSCA.Env(): ca.PEM, sidecarcontract.TLSCert.Env(): client.Cert,
		sidecarcontract.TLSKey.Env(): client.Key, sidecarcontract.UsernameFile.Env(): []byte("baton"),
		sidecarcontract.PasswordFile.Env(): []byte("s3cret")}
	for name, p := range injected(t) {
		dir := t.TempDir()
		env := map[string]string{}
		for _, e := range sidecarOf(t, p).Env {
			v := e.Value
			if e.ValueFrom != nil {
				v = map[string]string{"metadata.namespace": "team-a", "metadata.name": "pod-1", "metadata.uid": "0c1d"}[e.ValueFrom.FieldRef.FieldPath]
			}
			for _, mounted := range []string{CredentialsDir, TLSDir} {
				if strings.HasPrefix(v, mounted+"/") {
					content, ok := secrets[e.Name]
					if !ok {
						t.Fatalf("%s: %s names a file in %s that the test does not know", name, e.Name, mounted)
					}
					v = testpki.WriteFile(t, dir, strings.TrimPrefix(v, "/"), content)
				}
			}
			env[e.Name] = v
		}
		o, err := sidecar.ParseOptions(nil, func(k string) string { return env[k] })
		if err != nil {
			t.Errorf("%s: the sidecar rejects the injected env: %v", name, err)
			continue
		}
		if o.SocketPath != sidecarcontract.SocketPath || o.Pod.UID != "0c1d" {
			t.Errorf("%s: sidecar options %+v", name, o)
		}
		// The mounted credentials and TLS material reach the sidecar's connection.
		if _, ok := env[sidecarcontract.UsernameFile.Env()]; ok && (o.Cassandra.Username != "baton" || o.Cassandra.Password != "s3cret") {
			t.Errorf("%s: the sidecar did not read the mounted credentials: user %q", name, o.Cassandra.Username)
		}
		if _, ok := env[sidecarcontract.TLSCA.Env()]; ok && (o.Cassandra.TLS == nil || o.Cassandra.TLS.Cert == nil) {
			t.Errorf("%s: the sidecar did not read the mounted TLS material: %+v", name, o.Cassandra.TLS)
		}
		// The cluster the operator recorded for the lock reaches the sidecar, which refuses any other.
		if want := cases[name].dl.Status.CassandraClusterName; o.Cassandra.ClusterName != want {
			t.Errorf("%s: sidecar cluster name %q, want the recorded %q", name, o.Cassandra.ClusterName, want)
		}
	}
}

func TestRequired(t *testing.T) {
	pod := func(annotations map[string]string, mutate func(*corev1.Pod)) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: annotations}}
		p.Spec.Containers = []corev1.Container{{Name: "app"}}
		if mutate != nil {
			mutate(p)
		}
		return p
	}
	lock := map[string]string{AnnotationLock: "orders"}
	for _, tc := range []struct {
		name   string
		pod    *corev1.Pod
		want   bool
		reason string
	}{
		{"annotated", pod(lock, nil), true, ""},
		{"nil", nil, false, "no pod"},
		{"no annotations", pod(nil, nil), false, "no baton.dev/lock annotation"},
		{"empty lock", pod(map[string]string{AnnotationLock: " "}, nil), false, "no baton.dev/lock annotation"},
		{"opt out", pod(map[string]string{AnnotationLock: "orders", AnnotationInject: "false"}, nil), false, "opted out"},
		{"opt out no", pod(map[string]string{AnnotationLock: "orders", AnnotationInject: "No"}, nil), false, "opted out"},
		{"inject true", pod(map[string]string{AnnotationLock: "orders", AnnotationInject: "true"}, nil), true, ""},
		{"injected annotation", pod(map[string]string{AnnotationLock: "orders", AnnotationInjected: "img"}, nil), false, "already injected"},
		{"baton init container", pod(lock, func(p *corev1.Pod) {
			p.Spec.InitContainers = []corev1.Container{{Name: ContainerName}}
		}), false, "already injected"},
		{"baton container", pod(lock, func(p *corev1.Pod) {
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: ContainerName})
		}), false, "already injected"},
		{"host network", pod(lock, func(p *corev1.Pod) { p.Spec.HostNetwork = true }), false, "host network"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, reason := Required(tc.pod)
			if got != tc.want || !strings.Contains(reason, tc.reason) || (got && reason != "") {
				t.Errorf("Required = %v, %q; want %v, containing %q", got, reason, tc.want, tc.reason)
			}
		})
	}
}

func validLock() *batonv1.DistributedLock {
	return &batonv1.DistributedLock{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "orders"},
		Spec:       batonv1.DistributedLockSpec{LockIDs: []string{"orders"}},
	}
}

func appPod() *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "app", Annotations: map[string]string{AnnotationLock: "orders"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}},
	}
}

func TestInjectErrors(t *testing.T) {
	cfg := testConfig("unit")
	for _, tc := range []struct {
		name    string
		pod     func(*corev1.Pod)
		dl      func(*batonv1.DistributedLock)
		cfg     func(*Config)
		is      error
		message string
	}{
		{name: "no lock IDs", dl: func(d *batonv1.DistributedLock) { d.Spec.LockIDs = nil }, is: ErrInvalidLock, message: "spec.lockIds is empty"},
		{name: "too many lock IDs", dl: func(d *batonv1.DistributedLock) {
			d.Spec.LockIDs = nil
			for i := range batonv1.MaxLockIDs + 1 {
				d.Spec.LockIDs = append(d.Spec.LockIDs, fmt.Sprint("l", i))
			}
		}, is: ErrInvalidLock, message: "at most 16"},
		{name: "bad lock ID", dl: func(d *batonv1.DistributedLock) { d.Spec.LockIDs = []string{"a/b"} }, is: ErrInvalidLock, message: `"a/b"`},
		{name: "repeated lock ID", dl: func(d *batonv1.DistributedLock) { d.Spec.LockIDs = []string{"a", "a"} }, is: ErrInvalidLock, message: "twice"},
		{name: "bad mode", dl: func(d *batonv1.DistributedLock) { d.Spec.Mode = "Sometimes" }, is: ErrInvalidLock, message: "spec.mode"},
		{name: "bad traffic", dl: func(d *batonv1.DistributedLock) { d.Spec.TrafficPolicy = "Magic" }, is: ErrInvalidLock, message: "spec.trafficPolicy"},
		{name: "bad scope", dl: func(d *batonv1.DistributedLock) { d.Spec.Scope = "Cluster" }, is: ErrInvalidLock, message: "spec.scope"},
		{name: "short lease", dl: func(d *batonv1.DistributedLock) {
			d.Spec.LeaseDuration = &metav1.Duration{Duration: time.Millisecond}
		}, is: ErrInvalidLock, message: "spec.leaseDuration 1ms"},
		{name: "no contact points", cfg: func(c *Config) { c.Cassandra.ContactPoints = nil }, is: ErrInvalidLock, message: "no Cassandra contact points"},
		{name: "local quorum without dc", dl: func(d *batonv1.DistributedLock) {
			d.Spec.Cassandra = &batonv1.CassandraConnection{Consistency: batonv1.ConsistencyLocalQuorum}
		}, is: ErrInvalidLock, message: "set spec.cassandra.localDC"},
		{name: "bad keyspace", dl: func(d *batonv1.DistributedLock) {
			d.Spec.Cassandra = &batonv1.CassandraConnection{Keyspace: "1x"}
		}, is: ErrInvalidLock, message: "keyspace"},
		{name: "annotation names another lock", pod: func(p *corev1.Pod) { p.Annotations[AnnotationLock] = "other" }, is: ErrInvalidLock, message: `names "other"`},
		{name: "other namespace", dl: func(d *batonv1.DistributedLock) { d.Namespace = "team-b" }, is: ErrInvalidLock, message: "not in the pod's namespace"},
		{name: "baton container", pod: func(p *corev1.Pod) {
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: ContainerName})
		}, is: ErrConflict, message: "already has a container"},
		{name: "socket dir taken", pod: func(p *corev1.Pod) {
			p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "run", MountPath: sidecarcontract.SocketDir + "/"}}
		}, is: ErrConflict, message: `mounts volume "run"`},
		{name: "no image", cfg: func(c *Config) { c.Image = "" }, is: ErrInvalidConfig, message: "sidecar image is empty"},
		{name: "long shutdown", cfg: func(c *Config) { c.ShutdownTimeout = time.Hour }, is: ErrInvalidConfig, message: "shutdown timeout 1h0m0s"},
		{name: "bad consistency", cfg: func(c *Config) { c.Cassandra.Consistency = "ONE" }, is: ErrInvalidConfig, message: `"ONE"`},
		{name: "default connection with a Secret", cfg: func(c *Config) { c.Cassandra.TLSSecretRef = &batonv1.TLSSecretRef{Name: "tls"} },
			is: ErrInvalidConfig, message: "default Cassandra connection names Secrets"},
		{name: "global not allowed", dl: func(d *batonv1.DistributedLock) { d.Spec.Scope = batonv1.ScopeGlobal },
			cfg: func(c *Config) { c.GlobalNamespaces = []string{"shared"} }, is: ErrInvalidLock,
			message: `spec.scope Global is not allowed in namespace "team-a": the operator allows it in only namespaces shared`},
		{name: "global allowed nowhere", dl: func(d *batonv1.DistributedLock) { d.Spec.Scope = batonv1.ScopeGlobal },
			cfg: func(c *Config) { c.GlobalNamespaces = nil }, is: ErrInvalidLock, message: "allows it in no namespace"},
		{name: "bad global namespace", cfg: func(c *Config) { c.GlobalNamespaces = []string{"Bad_NS"} }, is: ErrInvalidConfig, message: `global namespace "Bad_NS"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, dl, c := appPod(), validLock(), cfg
			if tc.pod != nil {
				tc.pod(p)
			}
			if tc.dl != nil {
				tc.dl(dl)
			}
			if tc.cfg != nil {
				tc.cfg(&c)
			}
			out, err := Inject(p, dl, c)
			if !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.message) {
				t.Fatalf("Inject error = %v; want %v containing %q", err, tc.is, tc.message)
			}
			if out != nil {
				t.Error("Inject returned a pod with an error")
			}
		})
	}
	if _, err := Inject(appPod(), validLock(), cfg); err != nil {
		t.Fatalf("the base case fails: %v", err)
	}
}

func TestInjectReportsEveryProblem(t *testing.T) {
	dl := validLock()
	dl.Spec.LockIDs = []string{"a", "a"}
	dl.Spec.Mode = "x"
	_, err := Inject(appPod(), dl, Config{Image: "i"})
	for _, want := range []string{"twice", "spec.mode", "contact points", "team-a/orders"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not mention %q", err, want)
		}
	}
}

func TestMissingLockError(t *testing.T) {
	err := fmt.Errorf("webhook: %w", MissingLockError("team-a", "orders"))
	var nf *LockNotFoundError
	if !errors.As(err, &nf) || nf.Namespace != "team-a" || nf.Name != "orders" {
		t.Fatalf("errors.As(%v) = %+v", err, nf)
	}
	const want = "DistributedLock team-a/orders referenced by annotation baton.dev/lock not found: create it or fix the annotation"
	if nf.Error() != want {
		t.Errorf("message %q, want %q", nf.Error(), want)
	}
}

func TestInjectReplacesAppEnvAndKeepsGate(t *testing.T) {
	p := appPod()
	p.Spec.Containers[0].Env = []corev1.EnvVar{
		{Name: sidecarcontract.EnvLocks, Value: "old"}, {Name: "A", Value: "1"}, {Name: sidecarcontract.EnvLocks, Value: "older"},
	}
	p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: SocketVolume, MountPath: sidecarcontract.SocketDir}}
	p.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: readinessGate}}
	out, err := Inject(p, validLock(), testConfig("unit"))
	if err != nil {
		t.Fatal(err)
	}
	env := out.Spec.Containers[0].Env
	want := []corev1.EnvVar{{Name: sidecarcontract.EnvLocks, Value: "orders"}, {Name: "A", Value: "1"}, {Name: sidecarcontract.EnvSocket, Value: sidecarcontract.SocketPath}}
	if !reflect.DeepEqual(env, want) {
		t.Errorf("app env %v, want %v", env, want)
	}
	if n := len(out.Spec.Containers[0].VolumeMounts); n != 1 {
		t.Errorf("app has %d mounts, want 1", n)
	}
	if n := len(out.Spec.ReadinessGates); n != 1 {
		t.Errorf("%d readiness gates, want 1", n)
	}
}

func TestGlobalAllowed(t *testing.T) {
	for _, tc := range []struct {
		list []string
		ns   string
		want bool
	}{
		{nil, "a", false},
		{[]string{"a", "b"}, "b", true},
		{[]string{"a"}, "b", false},
		{[]string{"*"}, "anything", true},
	} {
		if got := (Config{GlobalNamespaces: tc.list}).GlobalAllowed(tc.ns); got != tc.want {
			t.Errorf("GlobalAllowed(%v, %q) = %v, want %v", tc.list, tc.ns, got, tc.want)
		}
	}
	dl := validLock()
	dl.Spec.Scope = batonv1.ScopeGlobal
	c := testConfig("unit")
	c.GlobalNamespaces = []string{dl.Namespace}
	if _, err := Inject(appPod(), dl, c); err != nil {
		t.Errorf("Global in an allowed namespace: %v", err)
	}
}

func TestStoreConnectionMergesOverride(t *testing.T) {
	dl := validLock()
	c := testConfig("unit")
	c.Cassandra.LocalDC = "dc1"
	got := c.StoreConnection(dl)
	if got.Keyspace != "baton" || got.Consistency != batonv1.ConsistencyQuorum || got.SerialConsistency != batonv1.SerialConsistencySerial || got.LocalDC != "dc1" {
		t.Errorf("defaults not applied: %+v", got)
	}
	dl.Spec.Cassandra = &batonv1.CassandraConnection{
		ContactPoints: []string{"x:1"}, Keyspace: "k", Consistency: batonv1.ConsistencyAll,
		CredentialsSecretRef: &batonv1.CredentialsSecretRef{Name: "creds"},
	}
	got = c.StoreConnection(dl)
	if !reflect.DeepEqual(got.ContactPoints, []string{"x:1"}) || got.Keyspace != "k" || got.Consistency != batonv1.ConsistencyAll ||
		got.LocalDC != "dc1" || got.SerialConsistency != batonv1.SerialConsistencySerial || got.CredentialsSecretRef == nil || got.CredentialsSecretRef.Name != "creds" || got.TLSSecretRef != nil {
		t.Errorf("override not merged: %+v", got)
	}
}

func TestConfigDefaults(t *testing.T) {
	out, err := Inject(appPod(), validLock(), testConfig("unit"))
	if err != nil {
		t.Fatal(err)
	}
	sc := sidecarOf(t, out)
	if !reflect.DeepEqual(sc.Resources, DefaultResources()) {
		t.Errorf("resources %v, want the defaults", sc.Resources)
	}
	if sc.ImagePullPolicy != corev1.PullIfNotPresent {
		t.Errorf("pull policy %q", sc.ImagePullPolicy)
	}
	if path.Dir(sidecarcontract.SocketPath) != sidecarcontract.SocketDir {
		t.Errorf("socket %s is not in %s", sidecarcontract.SocketPath, sidecarcontract.SocketDir)
	}
}
