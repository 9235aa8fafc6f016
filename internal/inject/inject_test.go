package inject_test

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	batonv1 "github.com/baton-dev/baton/api/v1"
	"github.com/baton-dev/baton/internal/inject"
	"github.com/baton-dev/baton/internal/sidecarcontract"
	"github.com/baton-dev/baton/internal/testing/testpki"
	"github.com/baton-dev/baton/sidecar"
	"github.com/google/go-cmp/cmp"
)

// lookup finds the DistributedLock the pod's annotation names, as the webhook does.
func (c testCase) lookup() (*batonv1.DistributedLock, error) {
	name := c.pod.Annotations[batonv1.AnnotationLock]
	if c.dl == nil || c.dl.Name != name {
		return nil, inject.MissingLockError(c.pod.Namespace, name)
	}
	return c.dl, nil
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
	if ok, _ := inject.Required(c.pod); !ok {
		return nil
	}
	dl, err := c.lookup()
	if err != nil {
		return nil
	}
	p, err := inject.Inject(c.pod, dl, testConfig(c.name))
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
		if _, err := inject.Inject(c.pod, dl, testConfig(c.name)); err != nil {
			continue
		}
		if diff := cmp.Diff(pod, c.pod); diff != "" {
			t.Errorf("%s: Inject changed its input pod (-before +after):\n%s", c.name, diff)
		}
		if diff := cmp.Diff(dlBefore, dl); diff != "" {
			t.Errorf("%s: Inject changed its DistributedLock (-before +after):\n%s", c.name, diff)
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
		if reason := inject.Marked(p); reason == "" {
			t.Errorf("%s: Marked finds no marker on the injected pod", c.name)
		}
		if !inject.Injected(p) {
			t.Errorf("%s: Injected says no to the injected pod", c.name)
		}
		// Without the markers, the container still keeps the pod from being injected again.
		delete(p.Annotations, batonv1.AnnotationInjected)
		delete(p.Labels, batonv1.LabelInjected)
		if inject.Injected(p) {
			t.Errorf("%s: Injected says yes without the markers", c.name)
		}
		if _, err := inject.Inject(p, c.dl, testConfig(c.name)); !errors.Is(err, inject.ErrConflict) {
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
			if list[i].Name == inject.ContainerName {
				return &list[i]
			}
		}
	}
	t.Fatalf("pod %s has no %s container", p.Name, inject.ContainerName)
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
				v = map[string]string{"metadata.namespace": "team-a", "metadata.name": "pod-1", "metadata.uid": "0c1d",
					"status.podIP": "198.18.0.7"}[e.ValueFrom.FieldRef.FieldPath]
			}
			for _, mounted := range []string{inject.CredentialsDir, inject.TLSDir} {
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
		if addr, err := o.HintAddr(); o.HintPort != 0 && (err != nil || addr.String() != "198.18.0.7:9465") {
			t.Errorf("%s: sidecar hint address %v, %v; want the pod IP and port 9465", name, addr, err)
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
	lock := map[string]string{batonv1.AnnotationLock: "orders"}
	for _, tc := range []struct {
		name   string
		pod    *corev1.Pod
		want   bool
		reason string
	}{
		{"annotated", pod(lock, nil), true, ""},
		{"nil", nil, false, "no pod"},
		{"no annotations", pod(nil, nil), false, "no baton.dev/lock annotation"},
		{"empty lock", pod(map[string]string{batonv1.AnnotationLock: " "}, nil), false, "no baton.dev/lock annotation"},
		{"opt out", pod(map[string]string{batonv1.AnnotationLock: "orders", batonv1.AnnotationInject: "false"}, nil), false, "opted out"},
		{"opt out no", pod(map[string]string{batonv1.AnnotationLock: "orders", batonv1.AnnotationInject: "No"}, nil), false, "opted out"},
		{"inject true", pod(map[string]string{batonv1.AnnotationLock: "orders", batonv1.AnnotationInject: "true"}, nil), true, ""},
		// Markers and a container of the sidecar's name are no reason to skip injection: the
		// webhook denies the first (Marked), Inject refuses the second.
		{"injected annotation", pod(map[string]string{batonv1.AnnotationLock: "orders", batonv1.AnnotationInjected: "img"}, nil), true, ""},
		{"baton init container", pod(lock, func(p *corev1.Pod) {
			p.Spec.InitContainers = []corev1.Container{{Name: inject.ContainerName}}
		}), true, ""},
		{"host network", pod(lock, func(p *corev1.Pod) { p.Spec.HostNetwork = true }), false, "host network"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, reason := inject.Required(tc.pod)
			if got != tc.want || !strings.Contains(reason, tc.reason) || (got && reason != "") {
				t.Errorf("Required = %v, %q; want %v, containing %q", got, reason, tc.want, tc.reason)
			}
		})
	}
}

// TestNoPodStartsAsHolder: injection labels the pod baton.dev/role=standby under the Label
// traffic policy, and leaves the label off under the other policies, where the sidecar does not
// maintain it. A pod whose author set the label to anything else is refused, not relabelled: a
// workload's selector may use the label, and a ReplicaSet whose pods lose it would create new
// ones without end.
func TestNoPodStartsAsHolder(t *testing.T) {
	for _, traffic := range []batonv1.TrafficPolicy{batonv1.TrafficLabel, batonv1.TrafficReadinessGate, batonv1.TrafficNone} {
		for _, role := range []string{"", batonv1.RoleHolder, batonv1.RoleStandby, "leader"} {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "w",
				Annotations: map[string]string{batonv1.AnnotationLock: "orders"}, Labels: map[string]string{"app": "w"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app"}}}}
			if role != "" {
				pod.Labels[batonv1.LabelRole] = role
			}
			dl := validLock()
			dl.Spec.TrafficPolicy = traffic
			out, err := inject.Inject(pod, dl, inject.Config{Image: "baton:test", Cassandra: batonv1.CassandraConnection{ContactPoints: []string{"db"}}})
			allowed := role == "" || (traffic == batonv1.TrafficLabel && role == batonv1.RoleStandby)
			if !allowed {
				if !errors.Is(err, inject.ErrConflict) || !strings.Contains(err.Error(), batonv1.LabelRole) {
					t.Errorf("%s, pod labelled %q: error %v, want ErrConflict naming %s", traffic, role, err, batonv1.LabelRole)
				}
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			got, ok := out.Labels[batonv1.LabelRole]
			if traffic == batonv1.TrafficLabel && got != batonv1.RoleStandby {
				t.Errorf("%s, pod labelled %q: %s = %q, want %s", traffic, role, batonv1.LabelRole, got, batonv1.RoleStandby)
			}
			if traffic != batonv1.TrafficLabel && ok {
				t.Errorf("%s, pod labelled %q: %s = %q, want no label", traffic, role, batonv1.LabelRole, got)
			}
			if out.Labels["app"] != "w" {
				t.Errorf("%s: the pod's own labels changed: %v", traffic, out.Labels)
			}
		}
	}
}

// TestMarked: a pod being created that carries the annotation or the label baton.dev/injected,
// whatever its value, is marked; nothing else is.
func TestMarked(t *testing.T) {
	for _, tc := range []struct {
		name        string
		annotations map[string]string
		labels      map[string]string
		want        string
	}{
		{"plain", map[string]string{batonv1.AnnotationLock: "orders"}, map[string]string{"app": "w"}, ""},
		{"annotation", map[string]string{batonv1.AnnotationInjected: "img"}, nil, "annotation baton.dev/injected"},
		{"empty annotation", map[string]string{batonv1.AnnotationInjected: ""}, nil, "annotation baton.dev/injected"},
		{"label", nil, map[string]string{batonv1.LabelInjected: "true"}, "label baton.dev/injected"},
		{"label false", nil, map[string]string{batonv1.LabelInjected: "false"}, "label baton.dev/injected"},
	} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: tc.annotations, Labels: tc.labels}}
		got := inject.Marked(pod)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s: Marked = %q, want %q", tc.name, got, tc.want)
		}
	}
	if inject.Marked(nil) != "" {
		t.Error("a nil pod is marked")
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
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "app", Annotations: map[string]string{batonv1.AnnotationLock: "orders"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}},
	}
}

func TestInjectErrors(t *testing.T) {
	cfg := testConfig("unit")
	for _, tc := range []struct {
		name    string
		pod     func(*corev1.Pod)
		dl      func(*batonv1.DistributedLock)
		cfg     func(*inject.Config)
		is      error
		message string
	}{
		{name: "no lock IDs", dl: func(d *batonv1.DistributedLock) { d.Spec.LockIDs = nil }, is: inject.ErrInvalidLock, message: "spec.lockIds is empty"},
		{name: "too many lock IDs", dl: func(d *batonv1.DistributedLock) {
			d.Spec.LockIDs = nil
			for i := range batonv1.MaxLockIDs + 1 {
				d.Spec.LockIDs = append(d.Spec.LockIDs, fmt.Sprint("l", i))
			}
		}, is: inject.ErrInvalidLock, message: "at most 16"},
		{name: "bad lock ID", dl: func(d *batonv1.DistributedLock) { d.Spec.LockIDs = []string{"a/b"} }, is: inject.ErrInvalidLock, message: `"a/b"`},
		{name: "repeated lock ID", dl: func(d *batonv1.DistributedLock) { d.Spec.LockIDs = []string{"a", "a"} }, is: inject.ErrInvalidLock, message: "twice"},
		{name: "bad mode", dl: func(d *batonv1.DistributedLock) { d.Spec.Mode = "Sometimes" }, is: inject.ErrInvalidLock, message: "spec.mode"},
		{name: "bad traffic", dl: func(d *batonv1.DistributedLock) { d.Spec.TrafficPolicy = "Magic" }, is: inject.ErrInvalidLock, message: "spec.trafficPolicy"},
		{name: "bad scope", dl: func(d *batonv1.DistributedLock) { d.Spec.Scope = "Cluster" }, is: inject.ErrInvalidLock, message: "spec.scope"},
		{name: "short lease", dl: func(d *batonv1.DistributedLock) {
			d.Spec.LeaseDuration = &metav1.Duration{Duration: time.Millisecond}
		}, is: inject.ErrInvalidLock, message: "spec.leaseDuration 1ms"},
		{name: "short yieldWhenUnready", dl: func(d *batonv1.DistributedLock) {
			d.Spec.YieldWhenUnready = &metav1.Duration{Duration: 100 * time.Millisecond}
		}, is: inject.ErrInvalidLock, message: "spec.yieldWhenUnready 100ms: use 1s to 1h, or leave it unset"},
		{name: "no contact points", cfg: func(c *inject.Config) { c.Cassandra.ContactPoints = nil }, is: inject.ErrInvalidLock, message: "no Cassandra contact points"},
		{name: "local quorum without dc", dl: func(d *batonv1.DistributedLock) {
			d.Spec.Cassandra = &batonv1.CassandraConnection{Consistency: batonv1.ConsistencyLocalQuorum}
		}, is: inject.ErrInvalidLock, message: "set spec.cassandra.localDC"},
		{name: "bad keyspace", dl: func(d *batonv1.DistributedLock) {
			d.Spec.Cassandra = &batonv1.CassandraConnection{Keyspace: "1x"}
		}, is: inject.ErrInvalidLock, message: "keyspace"},
		{name: "annotation names another lock", pod: func(p *corev1.Pod) { p.Annotations[batonv1.AnnotationLock] = "other" }, is: inject.ErrInvalidLock, message: `names "other"`},
		{name: "other namespace", dl: func(d *batonv1.DistributedLock) { d.Namespace = "team-b" }, is: inject.ErrInvalidLock, message: "not in the pod's namespace"},
		{name: "baton container", pod: func(p *corev1.Pod) {
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: inject.ContainerName})
		}, is: inject.ErrConflict, message: "already has a container"},
		{name: "socket dir taken", pod: func(p *corev1.Pod) {
			p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "run", MountPath: sidecarcontract.SocketDir + "/"}}
		}, is: inject.ErrConflict, message: `mounts volume "run"`},
		{name: "no image", cfg: func(c *inject.Config) { c.Image = "" }, is: inject.ErrInvalidConfig, message: "sidecar image is empty"},
		{name: "long shutdown", cfg: func(c *inject.Config) { c.ShutdownTimeout = time.Hour }, is: inject.ErrInvalidConfig, message: "shutdown timeout 1h0m0s"},
		{name: "privileged hint port", cfg: func(c *inject.Config) { c.HintPort = 53 }, is: inject.ErrInvalidConfig, message: "hint port 53: use 1024 to 65535"},
		{name: "hint port out of range", cfg: func(c *inject.Config) { c.HintPort = 70000 }, is: inject.ErrInvalidConfig, message: "hint port 70000"},
		{name: "privileged metrics port", cfg: func(c *inject.Config) { c.MetricsPort = 80 }, is: inject.ErrInvalidConfig, message: "metrics port 80: use 1024 to 65535"},
		{name: "bad consistency", cfg: func(c *inject.Config) { c.Cassandra.Consistency = "ONE" }, is: inject.ErrInvalidConfig, message: `"ONE"`},
		{name: "default connection with a Secret", cfg: func(c *inject.Config) { c.Cassandra.TLSSecretRef = &batonv1.TLSSecretRef{Name: "tls"} },
			is: inject.ErrInvalidConfig, message: "default Cassandra connection names Secrets"},
		{name: "global not allowed", dl: func(d *batonv1.DistributedLock) { d.Spec.Scope = batonv1.ScopeGlobal },
			cfg: func(c *inject.Config) { c.GlobalNamespaces = []string{"shared"} }, is: inject.ErrInvalidLock,
			message: `spec.scope Global is not allowed in namespace "team-a": the operator allows it in only namespaces shared`},
		{name: "global allowed nowhere", dl: func(d *batonv1.DistributedLock) { d.Spec.Scope = batonv1.ScopeGlobal },
			cfg: func(c *inject.Config) { c.GlobalNamespaces = nil }, is: inject.ErrInvalidLock, message: "allows it in no namespace"},
		{name: "bad global namespace", cfg: func(c *inject.Config) { c.GlobalNamespaces = []string{"Bad_NS"} }, is: inject.ErrInvalidConfig, message: `global namespace "Bad_NS"`},
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
			out, err := inject.Inject(p, dl, c)
			if !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.message) {
				t.Fatalf("Inject error = %v; want %v containing %q", err, tc.is, tc.message)
			}
			if out != nil {
				t.Error("Inject returned a pod with an error")
			}
		})
	}
	if _, err := inject.Inject(appPod(), validLock(), cfg); err != nil {
		t.Fatalf("the base case fails: %v", err)
	}
}

func TestInjectReportsEveryProblem(t *testing.T) {
	dl := validLock()
	dl.Spec.LockIDs = []string{"a", "a"}
	dl.Spec.Mode = "x"
	_, err := inject.Inject(appPod(), dl, inject.Config{Image: "i"})
	for _, want := range []string{"twice", "spec.mode", "contact points", "team-a/orders"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not mention %q", err, want)
		}
	}
}

func TestMissingLockError(t *testing.T) {
	err := fmt.Errorf("webhook: %w", inject.MissingLockError("team-a", "orders"))
	var nf *inject.LockNotFoundError
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
	p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: inject.SocketVolume, MountPath: sidecarcontract.SocketDir}}
	p.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: batonv1.ConditionLockHeld}}
	out, err := inject.Inject(p, validLock(), testConfig("unit"))
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
		if got := (inject.Config{GlobalNamespaces: tc.list}).GlobalAllowed(tc.ns); got != tc.want {
			t.Errorf("GlobalAllowed(%v, %q) = %v, want %v", tc.list, tc.ns, got, tc.want)
		}
	}
	dl := validLock()
	dl.Spec.Scope = batonv1.ScopeGlobal
	c := testConfig("unit")
	c.GlobalNamespaces = []string{dl.Namespace}
	if _, err := inject.Inject(appPod(), dl, c); err != nil {
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
	out, err := inject.Inject(appPod(), validLock(), testConfig("unit"))
	if err != nil {
		t.Fatal(err)
	}
	sc := sidecarOf(t, out)
	if !reflect.DeepEqual(sc.Resources, inject.DefaultResources()) {
		t.Errorf("resources %v, want the defaults", sc.Resources)
	}
	if sc.ImagePullPolicy != corev1.PullIfNotPresent {
		t.Errorf("pull policy %q", sc.ImagePullPolicy)
	}
}
