package charts_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"

	"github.com/baton-dev/baton/controllers"
	"github.com/baton-dev/baton/internal/inject"
	"github.com/baton-dev/baton/sidecar"
)

// TestMonitoringRender renders the chart's monitoring (issue 13, item 5): nothing by default; with
// every part on, a ServiceMonitor for the operator's metrics that keeps their namespace label, a
// PrometheusRule that Prometheus's own rule parser accepts (expressions included), and a Grafana
// dashboard that passes its schema (testdata/dashboard.schema.yaml, checked by the API server's
// validator). Every expression of both reads only metrics the operator exports, and a value the
// user sets reaches the rules.
func TestMonitoringRender(t *testing.T) {
	for key := range decode(t, template(t)) {
		if strings.HasPrefix(key, "PrometheusRule/") || strings.HasPrefix(key, "ServiceMonitor/") || key == "ConfigMap/baton-operator-dashboard" {
			t.Errorf("%s rendered by default; monitoring is opt-in", key)
		}
	}

	objs := decode(t, template(t, "--set", "monitoring.serviceMonitor.enabled=true", "--set", "monitoring.prometheusRule.enabled=true",
		"--set", "metrics.readers[0].kind=ServiceAccount", "--set", "metrics.readers[0].name=prometheus-k8s", "--set", "metrics.readers[0].namespace=monitoring",
		"--set", "monitoring.grafanaDashboard.enabled=true", "--set", "monitoring.prometheusRule.maxHolderChangesPerHour=12",
		"--set", "monitoring.prometheusRule.labels.release=prom", "--set", "monitoring.podMonitor.enabled=true", "--set", "sidecar.metricsPort=9464"))

	if got, _ := arg(get[*appsv1.Deployment](t, objs, "Deployment", "baton-operator"), "sidecar-metrics-port"); got != "9464" {
		t.Errorf("--sidecar-metrics-port=%q, want 9464 from sidecar.metricsPort", got)
	}
	pm := get[map[string]any](t, objs, "PodMonitor", "baton-sidecars")
	var pmSpec struct {
		NamespaceSelector struct {
			Any bool `json:"any"`
		} `json:"namespaceSelector"`
		Endpoints []struct {
			Port string `json:"port"`
		} `json:"podMetricsEndpoints"`
	}
	remarshal(t, pm["spec"], &pmSpec)
	if !pmSpec.NamespaceSelector.Any || len(pmSpec.Endpoints) != 1 || pmSpec.Endpoints[0].Port != inject.MetricsPortName {
		t.Errorf("PodMonitor spec %+v; want every namespace, port %s (the injected sidecar's)", pmSpec, inject.MetricsPortName)
	}

	sm := get[map[string]any](t, objs, "ServiceMonitor", "baton-operator")
	var smSpec struct {
		Selector  map[string]map[string]string `json:"selector"`
		Endpoints []struct {
			Port            string `json:"port"`
			HonorLabels     bool   `json:"honorLabels"`
			Scheme          string `json:"scheme"`
			BearerTokenFile string `json:"bearerTokenFile"`
		} `json:"endpoints"`
	}
	remarshal(t, sm["spec"], &smSpec)
	// The operator serves its metrics over TLS to authorized tokens only (issue 23, item 6).
	if len(smSpec.Endpoints) == 1 && (smSpec.Endpoints[0].Scheme != "https" ||
		smSpec.Endpoints[0].BearerTokenFile != "/var/run/secrets/kubernetes.io/serviceaccount/token") {
		t.Errorf("ServiceMonitor endpoint %+v; want scheme https with Prometheus's service account token", smSpec.Endpoints[0])
	}
	reader := get[*rbacv1.ClusterRole](t, objs, "ClusterRole", "baton-metrics-reader")
	if want := []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}}; !reflect.DeepEqual(reader.Rules, want) {
		t.Errorf("ClusterRole baton-metrics-reader rules %+v, want %+v", reader.Rules, want)
	}
	readerBinding := get[*rbacv1.ClusterRoleBinding](t, objs, "ClusterRoleBinding", "baton-metrics-reader")
	if want := []rbacv1.Subject{{Kind: "ServiceAccount", Name: "prometheus-k8s", Namespace: "monitoring"}}; readerBinding.RoleRef.Name != reader.Name ||
		!reflect.DeepEqual(readerBinding.Subjects, want) {
		t.Errorf("ClusterRoleBinding baton-metrics-reader: %+v %+v; want %s to %+v from metrics.readers", readerBinding.RoleRef, readerBinding.Subjects, reader.Name, want)
	}

	// Without metrics.secure: plain HTTP, no token, no reader role.
	plain := decode(t, template(t, "--set", "monitoring.serviceMonitor.enabled=true", "--set", "metrics.secure=false"))
	plainSpec := smSpec
	plainSpec.Endpoints = nil // a fresh slice: decoding into the old elements would keep their fields
	remarshal(t, get[map[string]any](t, plain, "ServiceMonitor", "baton-operator")["spec"], &plainSpec)
	if len(plainSpec.Endpoints) != 1 || plainSpec.Endpoints[0].Scheme == "https" || plainSpec.Endpoints[0].BearerTokenFile != "" {
		t.Errorf("ServiceMonitor endpoints %+v with metrics.secure=false; want plain HTTP without a token", plainSpec.Endpoints)
	}
	if _, ok := plain["ClusterRole/baton-metrics-reader"]; ok {
		t.Error("ClusterRole baton-metrics-reader rendered with metrics.secure=false")
	}
	if got, _ := arg(get[*appsv1.Deployment](t, plain, "Deployment", "baton-operator"), "metrics-secure"); got != "false" {
		t.Errorf("--metrics-secure=%q with metrics.secure=false", got)
	}
	svc := get[*corev1.Service](t, objs, "Service", "baton-operator-metrics")
	for k, v := range smSpec.Selector["matchLabels"] {
		if svc.Labels[k] != v {
			t.Errorf("ServiceMonitor selects %s=%s, which the metrics Service does not have (%v)", k, v, svc.Labels)
		}
	}
	if len(smSpec.Endpoints) != 1 || smSpec.Endpoints[0].Port != svc.Spec.Ports[0].Name || !smSpec.Endpoints[0].HonorLabels {
		t.Errorf("ServiceMonitor endpoints %+v; want the Service's port %q with honorLabels", smSpec.Endpoints, svc.Spec.Ports[0].Name)
	}

	rule := get[map[string]any](t, objs, "PrometheusRule", "baton-operator")
	if labels := rule["metadata"].(map[string]any)["labels"].(map[string]any); labels["release"] != "prom" {
		t.Errorf("PrometheusRule labels %v; want release=prom from monitoring.prometheusRule.labels", labels)
	}
	spec, err := yaml.Marshal(rule["spec"])
	if err != nil {
		t.Fatal(err)
	}
	groups, errs := rulefmt.Parse(spec, false, model.UTF8Validation)
	if len(errs) > 0 {
		t.Fatalf("Prometheus's rule parser rejects the PrometheusRule: %v\n%s", errs, spec)
	}
	var alerts []string
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			alerts = append(alerts, r.Alert)
			if !externalAlerts[r.Alert] { // TestOperatorDownAlerts checks those
				readsBatonMetrics(t, "alert "+r.Alert, r.Expr)
			}
			if r.Alert == "BatonLockHolderFlapping" && !strings.HasSuffix(r.Expr, "> 12") {
				t.Errorf("BatonLockHolderFlapping: %q; want the threshold 12 from monitoring.prometheusRule.maxHolderChangesPerHour", r.Expr)
			}
		}
	}
	if want := []string{"BatonLockWithoutHolder", "BatonLockStoreUnreachable", "BatonLockHolderFlapping", "BatonLockRevoked", "BatonOperatorDown", "BatonWebhookCallsFailing", "BatonSidecarLostLock"}; !slices.Equal(alerts, want) {
		t.Errorf("alerts %v; want %v", alerts, want)
	}

	cm := get[*corev1.ConfigMap](t, objs, "ConfigMap", "baton-operator-dashboard")
	if cm.Labels["grafana_dashboard"] != "1" {
		t.Errorf("dashboard ConfigMap labels %v; want grafana_dashboard=1 for Grafana's sidecar", cm.Labels)
	}
	checkDashboard(t, []byte(cm.Data["baton.json"]))
}

// TestMetricsCertificate: by default the operator makes its metrics certificate and the
// ServiceMonitor cannot verify it; with metrics.certSecret the operator serves that Secret's
// certificate (mounted, --metrics-cert-dir) and the ServiceMonitor verifies it with its ca.crt
// for the metrics Service's name. Without metrics.secure a certificate is an error.
func TestMetricsCertificate(t *testing.T) {
	type tlsConfig struct {
		InsecureSkipVerify bool   `json:"insecureSkipVerify"`
		ServerName         string `json:"serverName"`
		CA                 struct {
			Secret struct{ Name, Key string } `json:"secret"`
		} `json:"ca"`
	}
	endpointTLS := func(objs map[string]object) tlsConfig {
		var spec struct {
			Endpoints []struct {
				TLSConfig tlsConfig `json:"tlsConfig"`
			} `json:"endpoints"`
		}
		remarshal(t, get[map[string]any](t, objs, "ServiceMonitor", "baton-operator")["spec"], &spec)
		if len(spec.Endpoints) != 1 {
			t.Fatalf("ServiceMonitor endpoints %+v, want one", spec.Endpoints)
		}
		return spec.Endpoints[0].TLSConfig
	}

	def := decode(t, template(t, "--set", "monitoring.serviceMonitor.enabled=true"))
	if got := endpointTLS(def); !got.InsecureSkipVerify || got.CA.Secret.Name != "" {
		t.Errorf("default tlsConfig %+v; want insecureSkipVerify (a self-signed certificate) and no CA", got)
	}
	if dir, ok := arg(get[*appsv1.Deployment](t, def, "Deployment", "baton-operator"), "metrics-cert-dir"); ok {
		t.Errorf("--metrics-cert-dir=%q by default; want the operator's own certificate", dir)
	}

	objs := decode(t, template(t, "--set", "monitoring.serviceMonitor.enabled=true", "--set", "metrics.certSecret=baton-metrics-tls"))
	got := endpointTLS(objs)
	if got.InsecureSkipVerify || got.CA.Secret.Name != "baton-metrics-tls" || got.CA.Secret.Key != "ca.crt" {
		t.Errorf("tlsConfig %+v; want verification with ca.crt of Secret baton-metrics-tls", got)
	}
	svc := get[*corev1.Service](t, objs, "Service", "baton-operator-metrics")
	if want := svc.Name + "." + svc.Namespace + ".svc"; got.ServerName != want {
		t.Errorf("tlsConfig serverName %q, want the metrics Service's name %q", got.ServerName, want)
	}
	dep := get[*appsv1.Deployment](t, objs, "Deployment", "baton-operator")
	dir, _ := arg(dep, "metrics-cert-dir")
	var mounted bool
	for _, v := range dep.Spec.Template.Spec.Volumes {
		if v.Secret == nil || v.Secret.SecretName != "baton-metrics-tls" {
			continue
		}
		for _, m := range dep.Spec.Template.Spec.Containers[0].VolumeMounts {
			mounted = mounted || (m.Name == v.Name && m.MountPath == dir && m.ReadOnly)
		}
	}
	if dir == "" || !mounted {
		t.Errorf("--metrics-cert-dir=%q; want the directory where Secret baton-metrics-tls is mounted read-only", dir)
	}

	if _, err := helm(t, "template", release, chartDir, "--set", "metrics.certSecret=x", "--set", "metrics.secure=false"); err == nil ||
		!strings.Contains(err.Error(), "metrics.certSecret x needs metrics.secure") {
		t.Errorf("metrics.certSecret without metrics.secure: %v; want a clear error", err)
	}
}

// TestMonitoringNeedsMetrics: monitoring without the metrics it reads is a clear error.
func TestMonitoringNeedsMetrics(t *testing.T) {
	for _, tc := range []struct{ set, want string }{
		{"metrics.enabled=false", "set metrics.enabled=true"},
		{"monitoring.podMonitor.enabled=true", "set sidecar.metricsPort"},
	} {
		_, err := helm(t, "template", release, chartDir, "--set", "monitoring.prometheusRule.enabled=true", "--set", tc.set)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("helm template --set %s: %v; want an error that says to %s", tc.set, err, tc.want)
		}
	}
}

// checkDashboard validates a dashboard against testdata/dashboard.schema.yaml and checks what a
// schema cannot: unique panel IDs, panels within the 24 columns, and queries that parse, read only
// the operator's metrics and use only variables the dashboard defines.
func checkDashboard(t *testing.T, raw []byte) {
	t.Helper()
	var dash map[string]any
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("the dashboard is not JSON: %v", err)
	}
	b, err := os.ReadFile(filepath.Join("testdata", "dashboard.schema.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var v1 apiextensionsv1.JSONSchemaProps
	if err := yaml.UnmarshalStrict(b, &v1); err != nil {
		t.Fatalf("dashboard schema: %v", err)
	}
	var props apiextensions.JSONSchemaProps
	if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(&v1, &props, nil); err != nil {
		t.Fatal(err)
	}
	validator, _, err := validation.NewSchemaValidator(&props)
	if err != nil {
		t.Fatal(err)
	}
	if errs := validation.ValidateCustomResource(field.NewPath("dashboard"), dash, validator); len(errs) > 0 {
		t.Fatalf("the dashboard does not match testdata/dashboard.schema.yaml: %v", errs.ToAggregate())
	}

	var d struct {
		Templating struct {
			List []struct {
				Name string `json:"name"`
			} `json:"list"`
		} `json:"templating"`
		Panels []struct {
			ID      int                `json:"id"`
			Title   string             `json:"title"`
			GridPos struct{ W, X int } `json:"gridPos"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatal(err)
	}
	vars := map[string]bool{}
	for _, v := range d.Templating.List {
		vars[v.Name] = true
	}
	ids := map[int]bool{}
	used := regexp.MustCompile(`\$\{?([a-zA-Z_][a-zA-Z0-9_]*)`)
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel %q: ID %d used twice", p.Title, p.ID)
		}
		ids[p.ID] = true
		if p.GridPos.X+p.GridPos.W > 24 {
			t.Errorf("panel %q: x %d + w %d is past the 24 columns", p.Title, p.GridPos.X, p.GridPos.W)
		}
		for _, target := range p.Targets {
			readsBatonMetrics(t, "panel "+p.Title, target.Expr)
			for _, m := range used.FindAllStringSubmatch(target.Expr, -1) {
				if !vars[m[1]] {
					t.Errorf("panel %q uses $%s, which the dashboard does not define", p.Title, m[1])
				}
			}
		}
	}
}

// readsBatonMetrics checks that expr is PromQL and reads only metrics that the operator or the
// sidecars export (a histogram through its _bucket, _sum and _count series).
func readsBatonMetrics(t *testing.T, what, expr string) {
	t.Helper()
	e, err := parser.ParseExpr(expr)
	if err != nil {
		t.Errorf("%s: %q is not PromQL: %v", what, expr, err)
		return
	}
	known := append(controllers.MetricNames(), sidecar.MetricNames()...)
	exported := func(name string) bool {
		for _, suffix := range []string{"", "_bucket", "_sum", "_count"} {
			if family, ok := strings.CutSuffix(name, suffix); ok && slices.Contains(known, family) {
				return true
			}
		}
		return false
	}
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok && !exported(vs.Name) {
			t.Errorf("%s: %q reads %s, which neither the operator nor the sidecar exports (%v)", what, expr, vs.Name, known)
		}
		return nil
	})
}

// remarshal turns a decoded map into out through YAML.
func remarshal(t *testing.T, in, out any) {
	t.Helper()
	b, err := yaml.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, out); err != nil {
		t.Fatal(err)
	}
}
