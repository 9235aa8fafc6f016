package charts_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"

	batonv1 "github.com/baton-dev/baton/api/v1"
	"github.com/baton-dev/baton/internal/operator"
	"github.com/baton-dev/baton/internal/testing/testenv"
	"github.com/baton-dev/baton/internal/webhook"
	"github.com/google/go-cmp/cmp"
)

const (
	chartDir  = "baton"
	release   = "baton"
	namespace = "baton-system"
)

var (
	crdDir    = filepath.Join("..", "config", "crd", "bases")
	roleFile  = filepath.Join("..", "config", "rbac", "role.yaml")
	policyDir = filepath.Join("..", "config", "policy")
)

var kube = testenv.NewKubeWithCRDs(crdDir)

func TestMain(m *testing.M) {
	code := m.Run()
	kube.Stop()
	os.Exit(code)
}

// helm runs the real helm with a private home (no repositories, no plugins, no cluster) and
// returns its stdout; a failure's error carries its stderr.
func helm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	bin := testenv.Helm(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	home := t.TempDir()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"),
		"KUBECONFIG="+filepath.Join(home, "no-kubeconfig"),
	)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("helm %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

// template renders the chart as release baton in namespace baton-system with the given extra
// helm arguments and fails the test if helm does.
func template(t *testing.T, args ...string) string {
	t.Helper()
	out, err := helm(t, append([]string{"template", release, chartDir, "--namespace", namespace}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// object is one decoded manifest: typed when client-go's scheme or apiextensions knows its kind,
// a plain map otherwise (cert-manager's kinds).
type object struct {
	gvk       schema.GroupVersionKind
	name      string
	namespace string
	obj       any
}

func (o object) key() string { return o.gvk.Kind + "/" + o.name }

func newScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := apiextensionsv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return s
}

// splitDocs returns the YAML documents of r that hold an object (not only comments).
func splitDocs(r io.Reader) ([][]byte, error) {
	var docs [][]byte
	yr := utilyaml.NewYAMLReader(bufio.NewReader(r))
	for {
		doc, err := yr.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, err
		}
		if m := map[string]any{}; yaml.Unmarshal(doc, &m) == nil && len(m) > 0 {
			docs = append(docs, doc)
		}
	}
}

// decodeDocs decodes each object of r strictly, as the API server does: an unknown (or wrongly
// capitalised) or duplicated field is an error, so a misspelt key in a template cannot go
// unnoticed.
func decodeDocs(t *testing.T, r io.Reader) []object {
	t.Helper()
	docs, err := splitDocs(r)
	if err != nil {
		t.Fatalf("split manifest: %v", err)
	}
	strict := serializer.NewCodecFactory(newScheme(t), serializer.EnableStrict).UniversalDeserializer()
	var objs []object
	for _, doc := range docs {
		var meta struct {
			metav1.TypeMeta   `json:",inline"`
			metav1.ObjectMeta `json:"metadata"`
		}
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			t.Fatalf("decode %s: %v", doc, err)
		}
		o := object{gvk: meta.GroupVersionKind(), name: meta.Name, namespace: meta.Namespace}
		typed, _, err := strict.Decode(doc, nil, nil)
		switch {
		case runtime.IsNotRegisteredError(err):
			m := map[string]any{}
			if err := yaml.UnmarshalStrict(doc, &m); err != nil {
				t.Errorf("%s: %v", o.key(), err)
			}
			o.obj = m
		case err != nil:
			t.Errorf("%s: %v", o.key(), err)
		default:
			o.obj = typed
		}
		objs = append(objs, o)
	}
	return objs
}

// decode decodes a rendered manifest by kind/name and checks that every namespaced object is in
// the release namespace.
func decode(t *testing.T, manifest string) map[string]object {
	t.Helper()
	objs := map[string]object{}
	for _, o := range decodeDocs(t, strings.NewReader(manifest)) {
		if o.namespace != "" && o.namespace != namespace {
			t.Errorf("%s is in namespace %q, want the release namespace %s", o.key(), o.namespace, namespace)
		}
		if _, dup := objs[o.key()]; dup {
			t.Errorf("%s rendered twice", o.key())
		}
		objs[o.key()] = o
	}
	return objs
}

// readObjects decodes the objects in files.
func readObjects(t *testing.T, files ...string) []object {
	t.Helper()
	var objs []object
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		objs = append(objs, decodeDocs(t, bytes.NewReader(b))...)
	}
	return objs
}

// get returns the rendered object kind/name as T, failing the test if it is missing.
func get[T any](t *testing.T, objs map[string]object, kind, name string) T {
	t.Helper()
	o, ok := objs[kind+"/"+name]
	if !ok {
		t.Fatalf("%s/%s not rendered; have %v", kind, name, keys(objs))
	}
	v, ok := o.obj.(T)
	if !ok {
		t.Fatalf("%s/%s decoded as %T", kind, name, o.obj)
	}
	return v
}

func keys(objs map[string]object) []string {
	out := make([]string, 0, len(objs))
	for k := range objs {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func toYAML(v any) string {
	b, err := yaml.Marshal(v)
	if err != nil {
		return fmt.Sprintf("%+v", v)
	}
	return string(b)
}

// policyFiles are the manifests of config/policy that the chart ships (kustomization.yaml is not
// a manifest).
func policyFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(policyDir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return slices.DeleteFunc(files, func(f string) bool { return filepath.Base(f) == "kustomization.yaml" })
}

func arg(d *appsv1.Deployment, flag string) (string, bool) {
	for _, a := range d.Spec.Template.Spec.Containers[0].Args {
		if v, ok := strings.CutPrefix(a, "--"+flag+"="); ok {
			return v, true
		}
	}
	return "", false
}

func TestLint(t *testing.T) {
	for _, values := range [][]string{nil, {"--set", "webhook.certs=certManager", "--set", "cassandra.hosts=cassandra.db:9042"}} {
		out, err := helm(t, append([]string{"lint", "--strict", chartDir}, values...)...)
		if err != nil {
			t.Errorf("helm lint %v: %v\n%s", values, err, out)
		}
	}
}

// TestDefaultRender checks the default render object by object against its source of truth.
func TestDefaultRender(t *testing.T) {
	objs := decode(t, template(t, "--include-crds"))
	want := []string{
		"ServiceAccount/baton-operator", "Deployment/baton-operator", "PodDisruptionBudget/baton-operator",
		"Service/baton-webhook", "Service/baton-operator-metrics", "Secret/baton-webhook-tls",
		"ClusterRole/baton-operator", "ClusterRoleBinding/baton-operator", "Role/baton-operator", "RoleBinding/baton-operator",
		"MutatingWebhookConfiguration/baton-inject", "ClusterRole/baton-sidecar", "ClusterRole/baton-sidecar-label",
		"ValidatingAdmissionPolicy/baton-operator-pods", "ValidatingAdmissionPolicyBinding/baton-operator-pods",
		"ValidatingAdmissionPolicy/baton-operator-rolebindings", "ValidatingAdmissionPolicyBinding/baton-operator-rolebindings",
	}
	for _, k := range want {
		if _, ok := objs[k]; !ok {
			t.Errorf("%s not rendered", k)
		}
	}
	for _, k := range []string{"Certificate/baton-webhook", "Issuer/baton-selfsigned"} {
		if _, ok := objs[k]; ok {
			t.Errorf("%s rendered without webhook.certs=certManager", k)
		}
	}

	t.Run("webhook configuration", func(t *testing.T) {
		got := get[*admissionregistrationv1.MutatingWebhookConfiguration](t, objs, "MutatingWebhookConfiguration", "baton-inject")
		wantCfg := webhook.MutatingWebhookConfiguration("baton-inject", namespace, "baton-webhook", webhook.Path, nil)
		if !reflect.DeepEqual(got.Webhooks, wantCfg.Webhooks) {
			t.Errorf("webhooks differ from internal/webhook.MutatingWebhookConfiguration:\nchart:\n%s\nGo:\n%s", toYAML(got.Webhooks), toYAML(wantCfg.Webhooks))
		}
		if len(got.Annotations) != 0 {
			t.Errorf("annotations %v in self mode, want none", got.Annotations)
		}
	})

	t.Run("CRDs", func(t *testing.T) {
		files, err := filepath.Glob(filepath.Join(crdDir, "*.yaml"))
		if err != nil || len(files) == 0 {
			t.Fatalf("no CRDs in %s: %v", crdDir, err)
		}
		for _, want := range readObjects(t, files...) {
			got := get[*apiextensionsv1.CustomResourceDefinition](t, objs, "CustomResourceDefinition", want.name)
			if diff := cmp.Diff(want.obj, got); diff != "" {
				t.Errorf("the chart's CRD %s differs from %s (run make manifests; -want +got):\n%s", want.name, crdDir, diff)
			}
		}
	})

	t.Run("cluster role", func(t *testing.T) {
		var wantRules []rbacv1.PolicyRule
		if _, err := os.Stat(roleFile); err == nil {
			for _, o := range readObjects(t, roleFile) {
				if cr, ok := o.obj.(*rbacv1.ClusterRole); ok {
					wantRules = append(wantRules, cr.Rules...)
				}
			}
		} else {
			t.Logf("%s is not generated yet: the chart's ClusterRole must have no rules", roleFile)
		}
		got := get[*rbacv1.ClusterRole](t, objs, "ClusterRole", "baton-operator")
		if len(got.Rules) != len(wantRules) || (len(wantRules) > 0 && !reflect.DeepEqual(got.Rules, wantRules)) {
			t.Errorf("ClusterRole rules differ from %s (run make manifests):\nchart:\n%s\nconfig:\n%s", roleFile, toYAML(got.Rules), toYAML(wantRules))
		}
		crb := get[*rbacv1.ClusterRoleBinding](t, objs, "ClusterRoleBinding", "baton-operator")
		wantSubject := rbacv1.Subject{Kind: "ServiceAccount", Name: "baton-operator", Namespace: namespace}
		if crb.RoleRef.Name != "baton-operator" || !slices.Equal(crb.Subjects, []rbacv1.Subject{wantSubject}) {
			t.Errorf("ClusterRoleBinding = %+v, %+v", crb.RoleRef, crb.Subjects)
		}
	})

	t.Run("namespaced role", func(t *testing.T) {
		role := get[*rbacv1.Role](t, objs, "Role", "baton-operator")
		allows := func(group, resource string, verbs ...string) bool {
			for _, r := range role.Rules {
				if slices.Contains(r.APIGroups, group) && slices.Contains(r.Resources, resource) &&
					!slices.ContainsFunc(verbs, func(v string) bool { return !slices.Contains(r.Verbs, v) }) {
					return true
				}
			}
			return false
		}
		for _, c := range []struct {
			group, resource string
			verbs           []string
		}{
			{"coordination.k8s.io", "leases", []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
			{"", "events", []string{"create", "patch"}},
			{"events.k8s.io", "events", []string{"create", "patch"}},
			{"", "secrets", []string{"get", "list", "watch"}},
		} {
			if !allows(c.group, c.resource, c.verbs...) {
				t.Errorf("Role does not allow %v on %q %s", c.verbs, c.group, c.resource)
			}
		}
	})

	t.Run("sidecar access policy", func(t *testing.T) {
		files := policyFiles(t)
		if len(files) == 0 {
			t.Fatalf("no policy in %s: make manifests copies config/policy into the chart", policyDir)
		}
		for _, want := range readObjects(t, files...) {
			got, ok := objs[want.key()]
			if !ok {
				t.Errorf("%s from %s not rendered", want.key(), policyDir)
				continue
			}
			if diff := cmp.Diff(want.obj, got.obj); diff != "" {
				t.Errorf("%s differs from %s (run make manifests; -want +got):\n%s", want.key(), policyDir, diff)
			}
		}
	})

	t.Run("deployment", func(t *testing.T) {
		d := get[*appsv1.Deployment](t, objs, "Deployment", "baton-operator")
		operatorAccepts(t, d)
		if d.Spec.Replicas == nil || *d.Spec.Replicas != 2 {
			t.Errorf("replicas = %v, want 2", d.Spec.Replicas)
		}
		pod := d.Spec.Template.Spec
		if pod.ServiceAccountName != "baton-operator" {
			t.Errorf("serviceAccountName = %q", pod.ServiceAccountName)
		}
		if len(pod.Containers) != 1 {
			t.Fatalf("%d containers, want 1", len(pod.Containers))
		}
		c := pod.Containers[0]
		if c.Image != "ghcr.io/baton-dev/baton:v0.1.0" || !slices.Equal(c.Command, []string{"/usr/local/bin/operator"}) {
			t.Errorf("image %q command %v", c.Image, c.Command)
		}
		for flag, want := range map[string]string{
			"sidecar-image":                "ghcr.io/baton-dev/baton:v0.1.0",
			"webhook-certs":                "self",
			"webhook-secret":               "baton-webhook-tls",
			"webhook-service":              "baton-webhook",
			"webhook-configuration":        "baton-inject",
			"webhook-port":                 "9443",
			"webhook-cert-dir":             "/var/run/baton/webhook-certs",
			"metrics-bind-address":         ":8443",
			"metrics-secure":               "true",
			"health-probe-bind-address":    ":8081",
			"leader-elect":                 "true",
			"cassandra-schema-replication": "{'class': 'NetworkTopologyStrategy', 'replication_factor': 3}",
			"sidecar-hint-port":            "9465",
		} {
			if got, ok := arg(d, flag); !ok || got != want {
				t.Errorf("--%s = %q (set: %v), want %q", flag, got, ok, want)
			}
		}
		for _, flag := range []string{"cassandra-hosts", "global-namespaces", "cassandra-username-file", "cassandra-tls-ca",
			"cassandra-allow-anonymous", "cassandra-allowed-hosts", "cassandra-operator-keyspaces", "cassandra-tls-server-name"} {
			if v, ok := arg(d, flag); ok {
				t.Errorf("--%s=%q set by default", flag, v)
			}
		}
		if len(c.Env) != 1 || c.Env[0].Name != "POD_NAMESPACE" || c.Env[0].ValueFrom == nil ||
			c.Env[0].ValueFrom.FieldRef == nil || c.Env[0].ValueFrom.FieldRef.FieldPath != "metadata.namespace" {
			t.Errorf("env = %+v, want POD_NAMESPACE from metadata.namespace", c.Env)
		}
		ports := map[string]int32{}
		for _, p := range c.Ports {
			ports[p.Name] = p.ContainerPort
		}
		if !reflect.DeepEqual(ports, map[string]int32{"webhook": 9443, "health": 8081, "metrics": 8443}) {
			t.Errorf("ports = %v", ports)
		}
		for name, p := range map[string]*corev1.Probe{"/healthz": c.LivenessProbe, "/readyz": c.ReadinessProbe} {
			if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != name || p.HTTPGet.Port.String() != "health" {
				t.Errorf("probe %s = %+v", name, p)
			}
		}
		sc := c.SecurityContext
		if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.RunAsUser == nil || *sc.RunAsUser != 65532 ||
			sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			t.Errorf("securityContext = %s", toYAML(sc))
		}
		var certs *corev1.Volume
		for i := range pod.Volumes {
			if pod.Volumes[i].Name == "webhook-certs" {
				certs = &pod.Volumes[i]
			}
		}
		// The operator writes its certificate files itself (internal/certfiles): a writable
		// directory of its own, not the Secret volume the kubelet refreshes only at its next sync.
		if certs == nil || certs.EmptyDir == nil || certs.EmptyDir.Medium != corev1.StorageMediumMemory {
			t.Errorf("webhook-certs volume = %s, want an emptyDir in memory", toYAML(certs))
		}
		if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
			return m.Name == "webhook-certs" && m.MountPath == "/var/run/baton/webhook-certs" && !m.ReadOnly
		}) {
			t.Errorf("volumeMounts = %+v", c.VolumeMounts)
		}

		pdb := get[*policyv1.PodDisruptionBudget](t, objs, "PodDisruptionBudget", "baton-operator")
		if !reflect.DeepEqual(pdb.Spec.Selector, d.Spec.Selector) {
			t.Errorf("PDB selector %v, Deployment selector %v", pdb.Spec.Selector, d.Spec.Selector)
		}
		svc := get[*corev1.Service](t, objs, "Service", "baton-webhook")
		if !reflect.DeepEqual(svc.Spec.Selector, d.Spec.Selector.MatchLabels) ||
			len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 443 || svc.Spec.Ports[0].TargetPort.String() != "webhook" {
			t.Errorf("Service baton-webhook spec = %s", toYAML(svc.Spec))
		}
		if s := get[*corev1.Secret](t, objs, "Secret", "baton-webhook-tls"); len(s.Data) != 0 || len(s.StringData) != 0 {
			t.Errorf("the webhook Secret has data; the operator must be the only one to write it")
		}
	})
}

func TestCertManagerRender(t *testing.T) {
	objs := decode(t, template(t, "--set", "webhook.certs=certManager"))
	if _, ok := objs["Secret/baton-webhook-tls"]; ok {
		t.Error("Secret baton-webhook-tls rendered in certManager mode; cert-manager creates it")
	}
	mwc := get[*admissionregistrationv1.MutatingWebhookConfiguration](t, objs, "MutatingWebhookConfiguration", "baton-inject")
	if got := mwc.Annotations["cert-manager.io/inject-ca-from"]; got != namespace+"/baton-webhook" {
		t.Errorf("inject-ca-from = %q, want %s/baton-webhook", got, namespace)
	}
	wantCfg := webhook.MutatingWebhookConfiguration("baton-inject", namespace, "baton-webhook", webhook.Path, nil)
	if !reflect.DeepEqual(mwc.Webhooks, wantCfg.Webhooks) {
		t.Errorf("webhooks differ from internal/webhook.MutatingWebhookConfiguration:\n%s", toYAML(mwc.Webhooks))
	}
	d := get[*appsv1.Deployment](t, objs, "Deployment", "baton-operator")
	operatorAccepts(t, d)
	if got, _ := arg(d, "webhook-certs"); got != "external" {
		t.Errorf("--webhook-certs=%q, want external", got)
	}
	// cert-manager's Secret, mounted read-only: the operator only reads it.
	pod := d.Spec.Template.Spec
	if !slices.ContainsFunc(pod.Volumes, func(v corev1.Volume) bool {
		return v.Name == "webhook-certs" && v.Secret != nil && v.Secret.SecretName == "baton-webhook-tls" && v.Secret.Optional != nil && *v.Secret.Optional
	}) {
		t.Errorf("volumes = %s, want webhook-certs from the optional Secret baton-webhook-tls", toYAML(pod.Volumes))
	}
	if !slices.ContainsFunc(pod.Containers[0].VolumeMounts, func(m corev1.VolumeMount) bool {
		return m.Name == "webhook-certs" && m.MountPath == "/var/run/baton/webhook-certs" && m.ReadOnly
	}) {
		t.Errorf("volumeMounts = %+v", pod.Containers[0].VolumeMounts)
	}

	cert := get[map[string]any](t, objs, "Certificate", "baton-webhook")
	var spec struct {
		SecretName string            `json:"secretName"`
		DNSNames   []string          `json:"dnsNames"`
		IssuerRef  map[string]string `json:"issuerRef"`
	}
	remarshal(t, cert["spec"], &spec)
	wantDNS := []string{"baton-webhook." + namespace + ".svc", "baton-webhook." + namespace + ".svc.cluster.local"}
	if spec.SecretName != "baton-webhook-tls" || !slices.Equal(spec.DNSNames, wantDNS) {
		t.Errorf("Certificate spec = %+v, want secret baton-webhook-tls and DNS names %v", spec, wantDNS)
	}
	if spec.IssuerRef["name"] != "baton-selfsigned" || spec.IssuerRef["kind"] != "Issuer" {
		t.Errorf("issuerRef = %v, want the chart's Issuer baton-selfsigned", spec.IssuerRef)
	}
	issuer := get[map[string]any](t, objs, "Issuer", "baton-selfsigned")
	if !reflect.DeepEqual(issuer["spec"], map[string]any{"selfSigned": map[string]any{}}) {
		t.Errorf("Issuer spec = %v, want selfSigned", issuer["spec"])
	}

	// An issuer of the user's replaces the chart's.
	objs = decode(t, template(t, "--set", "webhook.certs=certManager",
		"--set", "webhook.certManager.issuerRef.name=corp-ca", "--set", "webhook.certManager.issuerRef.kind=ClusterIssuer"))
	if _, ok := objs["Issuer/baton-selfsigned"]; ok {
		t.Error("Issuer baton-selfsigned rendered although webhook.certManager.issuerRef is set")
	}
	cert = get[map[string]any](t, objs, "Certificate", "baton-webhook")
	if ref := cert["spec"].(map[string]any)["issuerRef"]; !reflect.DeepEqual(ref, map[string]any{"name": "corp-ca", "kind": "ClusterIssuer"}) {
		t.Errorf("issuerRef = %v, want corp-ca ClusterIssuer", ref)
	}
}

// TestValues renders non-default values and checks what they turn into.
func TestValues(t *testing.T) {
	tests := []struct {
		name  string
		set   []string
		check func(t *testing.T, objs map[string]object, d *appsv1.Deployment)
	}{
		{"hosts as a list", []string{"cassandra.hosts={cass-0.db:9042,cass-1.db}"}, func(t *testing.T, _ map[string]object, d *appsv1.Deployment) {
			if got, _ := arg(d, "cassandra-hosts"); got != "cass-0.db:9042,cass-1.db" {
				t.Errorf("--cassandra-hosts=%q", got)
			}
		}},
		{"hosts as a string", []string{`cassandra.hosts=cass-0.db:9042\,cass-1.db`}, func(t *testing.T, _ map[string]object, d *appsv1.Deployment) {
			if got, _ := arg(d, "cassandra-hosts"); got != "cass-0.db:9042,cass-1.db" {
				t.Errorf("--cassandra-hosts=%q", got)
			}
		}},
		{"global namespaces", []string{"globalNamespaces={shop,billing}"}, func(t *testing.T, _ map[string]object, d *appsv1.Deployment) {
			if got, _ := arg(d, "global-namespaces"); got != "shop,billing" {
				t.Errorf("--global-namespaces=%q", got)
			}
		}},
		{"credentials and TLS", []string{"cassandra.credentials.secretName=cass-creds", "cassandra.tls.secretName=cass-tls"}, func(t *testing.T, _ map[string]object, d *appsv1.Deployment) {
			for flag, want := range map[string]string{
				"cassandra-username-file": "/var/run/baton/cassandra-credentials/username",
				"cassandra-password-file": "/var/run/baton/cassandra-credentials/password",
				"cassandra-tls-ca":        "/var/run/baton/cassandra-tls/ca.crt",
				"cassandra-tls-cert":      "/var/run/baton/cassandra-tls/tls.crt",
				"cassandra-tls-key":       "/var/run/baton/cassandra-tls/tls.key",
			} {
				if got, _ := arg(d, flag); got != want {
					t.Errorf("--%s=%q, want %q", flag, got, want)
				}
			}
			secrets := map[string]string{}
			for _, v := range d.Spec.Template.Spec.Volumes {
				if v.Secret != nil {
					secrets[v.Name] = v.Secret.SecretName
				}
			}
			if secrets["cassandra-credentials"] != "cass-creds" || secrets["cassandra-tls"] != "cass-tls" {
				t.Errorf("secret volumes = %v", secrets)
			}
		}},
		{"tenancy", []string{"cassandra.allowedHosts={cass-0.db:9042,cass-eu.db}", "cassandra.operatorKeyspaces={baton,baton_eu}", "cassandra.allowAnonymous=true"},
			func(t *testing.T, _ map[string]object, d *appsv1.Deployment) {
				for flag, want := range map[string]string{
					"cassandra-allowed-hosts":      "cass-0.db:9042,cass-eu.db",
					"cassandra-operator-keyspaces": "baton,baton_eu",
					"cassandra-allow-anonymous":    "true",
				} {
					if got, _ := arg(d, flag); got != want {
						t.Errorf("--%s=%q, want %q", flag, got, want)
					}
				}
			}},
		{"TLS with a CA only", []string{"cassandra.tls.secretName=cass-ca", "cassandra.tls.certKey=", "cassandra.tls.serverName=cassandra.db.svc"}, func(t *testing.T, _ map[string]object, d *appsv1.Deployment) {
			if _, ok := arg(d, "cassandra-tls-ca"); !ok {
				t.Error("--cassandra-tls-ca missing")
			}
			if got, _ := arg(d, "cassandra-tls-server-name"); got != "cassandra.db.svc" {
				t.Errorf("--cassandra-tls-server-name=%q, want the chart's cassandra.tls.serverName", got)
			}
			for _, flag := range []string{"cassandra-tls-cert", "cassandra-tls-key"} {
				if v, ok := arg(d, flag); ok {
					t.Errorf("--%s=%q without a client certificate", flag, v)
				}
			}
		}},
		{"one replica", []string{"replicas=1", "leaderElection.enabled=false"}, func(t *testing.T, objs map[string]object, d *appsv1.Deployment) {
			if _, ok := objs["PodDisruptionBudget/baton-operator"]; ok {
				t.Error("PodDisruptionBudget rendered for one replica")
			}
			if got, _ := arg(d, "leader-elect"); got != "false" {
				t.Errorf("--leader-elect=%q", got)
			}
		}},
		{"no policy, no metrics", []string{"sidecarAccessPolicy.enabled=false", "operatorAccessPolicy.enabled=false", "metrics.enabled=false"}, func(t *testing.T, objs map[string]object, d *appsv1.Deployment) {
			for k := range objs {
				if strings.HasPrefix(k, "ValidatingAdmissionPolicy") {
					t.Errorf("%s rendered with sidecarAccessPolicy.enabled=false and operatorAccessPolicy.enabled=false", k)
				}
			}
			if _, ok := objs["Service/baton-operator-metrics"]; ok {
				t.Error("metrics Service rendered with metrics.enabled=false")
			}
			if got, _ := arg(d, "metrics-bind-address"); got != "0" {
				t.Errorf("--metrics-bind-address=%q, want 0", got)
			}
		}},
		{"images", []string{"image.tag=v0.2.0", "sidecar.image.repository=registry.example/baton-sidecar"}, func(t *testing.T, _ map[string]object, d *appsv1.Deployment) {
			if got := d.Spec.Template.Spec.Containers[0].Image; got != "ghcr.io/baton-dev/baton:v0.2.0" {
				t.Errorf("image = %q", got)
			}
			if got, _ := arg(d, "sidecar-image"); got != "registry.example/baton-sidecar:v0.1.0" {
				t.Errorf("--sidecar-image=%q", got)
			}
		}},
		{"hints off", []string{"sidecar.hintPort=0"}, func(t *testing.T, _ map[string]object, d *appsv1.Deployment) {
			if got, _ := arg(d, "sidecar-hint-port"); got != "0" {
				t.Errorf("--sidecar-hint-port=%q, want 0", got)
			}
		}},
		{"sidecar resources", []string{"sidecar.resources.limits.cpu=200m", "sidecar.resources.requests.memory="}, func(t *testing.T, _ map[string]object, d *appsv1.Deployment) {
			if got, _ := arg(d, "sidecar-cpu-limit"); got != "200m" {
				t.Errorf("--sidecar-cpu-limit=%q", got)
			}
			if got, ok := arg(d, "sidecar-memory-request"); !ok || got != "" {
				t.Errorf("--sidecar-memory-request=%q (set: %v), want it set empty", got, ok)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var args []string
			for _, s := range tc.set {
				args = append(args, "--set", s)
			}
			objs := decode(t, template(t, args...))
			d := get[*appsv1.Deployment](t, objs, "Deployment", "baton-operator")
			tc.check(t, objs, d)
			operatorAccepts(t, d)
		})
	}
}

// operatorAccepts checks that the operator binary's own flag parser takes the arguments the chart
// renders, so chart and flags cannot drift apart.
func operatorAccepts(t *testing.T, d *appsv1.Deployment) {
	t.Helper()
	c := d.Spec.Template.Spec.Containers[0]
	env := func(name string) string {
		if name == "POD_NAMESPACE" {
			return namespace
		}
		return ""
	}
	if _, err := operator.ParseOptions(c.Args, env); err != nil {
		t.Errorf("the operator rejects the chart's arguments %q: %v", c.Args, err)
	}
}

// TestBadValues checks that bad values fail the install with a message that names the problem.
func TestBadValues(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"unknown certs mode", []string{"--set", "webhook.certs=manual"}, "at '/webhook/certs': value must be one of 'self', 'certManager'"},
		{"misspelt key", []string{"--set", "replica=3"}, "additional properties 'replica' not allowed"},
		{"no replicas", []string{"--set", "replicas=0"}, "at '/replicas': minimum: got 0, want 1"},
		{"weak consistency", []string{"--set", "cassandra.consistency=ONE"}, "at '/cassandra/consistency': value must be one of"},
		{"bad namespace", []string{"--set", "globalNamespaces={Shop_EU}"}, "'Shop_EU' does not match pattern"},
		{"duration without a unit", []string{"--set-string", "statusInterval=10"}, "at '/statusInterval': '10' does not match pattern"},
		{"bad quantity", []string{"--set", "sidecar.resources.limits.memory=lots"}, "at '/sidecar/resources/limits/memory'"},
		{"empty image repository", []string{"--set", "image.repository="}, "at '/image/repository': minLength"},
		{"issuer without name", []string{"--set", "webhook.certManager.issuerRef.kind=ClusterIssuer"}, "missing property 'name'"},
		{"replicas without leader election", []string{"--set", "leaderElection.enabled=false"}, "leaderElection.enabled is false"},
		{"LOCAL_QUORUM without local DC", []string{"--set", "cassandra.consistency=LOCAL_QUORUM"}, "need cassandra.localDC"},
		{"privileged hint port", []string{"--set", "sidecar.hintPort=53"}, "at '/sidecar/hintPort'"},
		{"cluster too old", []string{"--kube-version", "1.29.0"}, "incompatible with Kubernetes v1.29.0"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, err := helm(t, append([]string{"template", release, chartDir, "--namespace", namespace}, tc.args...)...)
			if err == nil {
				t.Fatalf("helm template %v succeeded, want an error containing %q:\n%s", tc.args, tc.want, out)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error does not contain %q:\n%v", tc.want, err)
			}
		})
	}
}

// TestServerDryRun has a real kube-apiserver validate and admit (without persisting) every object
// of the default render, as kubectl apply does. cert-manager's CRDs are not installed, so the
// certManager render is not applied.
func TestServerDryRun(t *testing.T) {
	manifest := template(t)
	kubectl := testenv.Kubectl(t)
	cfg := kube.Config(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}
	if _, err := kube.Client(t).CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "baton.yaml")
	if err := os.WriteFile(file, []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(ctx, kubectl, "--kubeconfig", testenv.WriteKubeconfig(t, cfg),
		"apply", "--dry-run=server", "-f", file).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl apply --dry-run=server: %v\n%s", err, out)
	}
	t.Logf("$ kubectl apply --dry-run=server -f <default render>\n%s", out)
	accepted := strings.Count(string(out), "(server dry run)")
	if want := len(decode(t, manifest)); accepted != want {
		t.Errorf("the API server accepted %d objects, the chart renders %d", accepted, want)
	}
}

// TestNotesWarnWithoutCredentials: helm install without Cassandra credentials for the operator
// warns, and says what the operator does then; with credentials it does not warn. (helm install
// --dry-run needs an API server to ask for its version, hence the real one.)
func TestNotesWarnWithoutCredentials(t *testing.T) {
	kubeconfig := testenv.WriteKubeconfig(t, kube.Config(t))
	for _, tc := range []struct {
		name string
		set  []string
		want []string // in the notes; nil: no warning at all
	}{
		{"defaults", nil, []string{"WARNING: the operator has no Cassandra credentials", "refuses every DistributedLock that does not name its own"}},
		{"anonymous", []string{"cassandra.allowAnonymous=true"}, []string{"WARNING: the operator has no Cassandra credentials", "can then take, release or revoke every lock"}},
		{"TLS without a client certificate", []string{"cassandra.tls.secretName=cass-ca", "cassandra.tls.certKey="}, []string{"WARNING"}},
		{"password login", []string{"cassandra.credentials.secretName=cass-creds"}, nil},
		{"client certificate", []string{"cassandra.tls.secretName=cass-tls"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{"install", release, chartDir, "--namespace", namespace, "--dry-run=client", "--kubeconfig", kubeconfig}
			for _, s := range tc.set {
				args = append(args, "--set", s)
			}
			out, err := helm(t, args...)
			if err != nil {
				t.Fatal(err)
			}
			_, notes, ok := strings.Cut(out, "NOTES:")
			if !ok {
				t.Fatalf("no NOTES in helm's output:\n%s", out)
			}
			if tc.want == nil && strings.Contains(notes, "WARNING") {
				t.Errorf("notes warn although the operator has credentials:\n%s", notes)
			}
			for _, w := range tc.want {
				if !strings.Contains(notes, w) {
					t.Errorf("notes lack %q:\n%s", w, notes)
				}
			}
		})
	}
}

// TestNotesExampleLockIsAccepted: the DistributedLock the install notes show would be accepted by
// the operator they install: it names a credentials Secret labelled for the operator (which holds
// a user name and password), and a tlsSecretRef holding ca.crt when the operator reaches its
// Cassandra over TLS; only with cassandra.allowAnonymous may it name none, and then the notes say why.
func TestNotesExampleLockIsAccepted(t *testing.T) {
	kubeconfig := testenv.WriteKubeconfig(t, kube.Config(t))
	for _, tc := range []struct {
		name      string
		set       []string
		tls, anon bool
	}{
		{"defaults", nil, false, false},
		{"password login", []string{"cassandra.credentials.secretName=cass-creds"}, false, false},
		{"TLS", []string{"cassandra.credentials.secretName=cass-creds", "cassandra.tls.secretName=cass-tls"}, true, false},
		{"anonymous", []string{"cassandra.allowAnonymous=true"}, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{"install", release, chartDir, "--namespace", namespace, "--dry-run=client", "--kubeconfig", kubeconfig}
			for _, s := range tc.set {
				args = append(args, "--set", s)
			}
			out, err := helm(t, args...)
			if err != nil {
				t.Fatal(err)
			}
			_, notes, _ := strings.Cut(out, "NOTES:")
			_, example, ok := strings.Cut(notes, "<<YAML\n")
			if ok {
				example, _, ok = strings.Cut(example, "\n  YAML")
			}
			if !ok {
				t.Fatalf("no example between <<YAML and YAML in the notes:\n%s", notes)
			}
			secrets := map[string]corev1.Secret{}
			var dl *batonv1.DistributedLock
			for _, doc := range strings.Split(example, "\n  ---\n") {
				var meta metav1.TypeMeta
				if err := yaml.Unmarshal([]byte(unindent(doc)), &meta); err != nil {
					t.Fatalf("example document %q: %v", doc, err)
				}
				switch meta.Kind {
				case "Secret":
					var s corev1.Secret
					if err := yaml.UnmarshalStrict([]byte(unindent(doc)), &s); err != nil {
						t.Fatalf("example Secret: %v", err)
					}
					secrets[s.Namespace+"/"+s.Name] = s
				case "DistributedLock":
					dl = &batonv1.DistributedLock{}
					if err := yaml.UnmarshalStrict([]byte(unindent(doc)), dl); err != nil {
						t.Fatalf("example DistributedLock: %v", err)
					}
				}
			}
			if dl == nil {
				t.Fatalf("no DistributedLock in the notes' example:\n%s", example)
			}
			c := dl.Spec.Cassandra
			if c == nil || c.CredentialsSecretRef == nil {
				if !tc.anon {
					t.Fatalf("the example lock names no credentialsSecretRef, which the operator refuses:\n%s", example)
				}
				if !strings.Contains(notes, "cassandra.allowAnonymous") {
					t.Errorf("the example lock names no credentials and the notes do not say that allowAnonymous lets it:\n%s", notes)
				}
				return
			}
			s, ok := secrets[dl.Namespace+"/"+c.CredentialsSecretRef.Name]
			if !ok || s.Labels[batonv1.LabelCassandraSecret] != "true" || s.StringData["username"] == "" || s.StringData["password"] == "" {
				t.Errorf("the example's credentials Secret %s is missing, unlabelled or lacks username and password:\n%s", c.CredentialsSecretRef.Name, example)
			}
			if tc.tls {
				if c.TLSSecretRef == nil {
					t.Fatalf("the operator reaches its Cassandra over TLS and the example lock names no tlsSecretRef:\n%s", example)
				}
				if s, ok := secrets[dl.Namespace+"/"+c.TLSSecretRef.Name]; !ok || s.Labels[batonv1.LabelCassandraSecret] != "true" || s.StringData["ca.crt"] == "" {
					t.Errorf("the example's TLS Secret %s is missing, unlabelled or lacks ca.crt:\n%s", c.TLSSecretRef.Name, example)
				}
			} else if c.TLSSecretRef != nil {
				t.Errorf("the example lock turns TLS on for an operator without it:\n%s", example)
			}
		})
	}
}

// unindent removes the two spaces the notes indent their example by.
func unindent(doc string) string {
	lines := strings.Split(doc, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimPrefix(l, "  ")
	}
	return strings.Join(lines, "\n")
}
