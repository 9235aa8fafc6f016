package charts_test

import (
	"context"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	admissionmetrics "k8s.io/apiserver/pkg/admission/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
	"sigs.k8s.io/yaml"
)

// externalAlerts are the alerts that read metrics baton does not export: Prometheus's own up, and
// the API server's admission metrics. TestOperatorDownAlerts checks them instead of
// readsBatonMetrics.
var externalAlerts = map[string]bool{"BatonOperatorDown": true, "BatonWebhookCallsFailing": true}

// ruleExprs renders the chart with args and returns the expression and "for" of each alert of its
// PrometheusRule, after Prometheus's rule parser accepted them.
func ruleExprs(t *testing.T, args ...string) (objs map[string]object, exprs, fors map[string]string) {
	t.Helper()
	objs = decode(t, template(t, args...))
	rule := get[map[string]any](t, objs, "PrometheusRule", "baton-operator")
	spec, err := yaml.Marshal(rule["spec"])
	if err != nil {
		t.Fatal(err)
	}
	groups, errs := rulefmt.Parse(spec, false, model.UTF8Validation)
	if len(errs) > 0 {
		t.Fatalf("Prometheus's rule parser rejects the PrometheusRule: %v", errs)
	}
	exprs, fors = map[string]string{}, map[string]string{}
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			exprs[r.Alert], fors[r.Alert] = r.Expr, r.For.String()
		}
	}
	return objs, exprs, fors
}

// TestOperatorDownAlerts (issue 25, item 7): the PrometheusRule's BatonOperatorDown and
// BatonWebhookCallsFailing select what their sources write. BatonOperatorDown is
// absent(up{...} == 1) over the targets the chart's ServiceMonitor makes (job = the metrics
// Service's name, namespace = the release's): it fires when none of them is up and when there is
// none at all; a job of your own (operatorJob) replaces the Service's name. BatonWebhookCallsFailing
// selects the series k8s.io/apiserver's admission metrics write (gathered from that code) when the
// API server could not call the chart's webhook, and not those of the webhook's own denials.
//
// What it does not check: the expressions' values over time (Prometheus's engine is not run here;
// Prometheus's rule parser accepted them in ruleExprs).
func TestOperatorDownAlerts(t *testing.T) {
	objs, exprs, fors := ruleExprs(t, "--set", "monitoring.prometheusRule.enabled=true", "--set", "monitoring.serviceMonitor.enabled=true")
	down, failing := exprs["BatonOperatorDown"], exprs["BatonWebhookCallsFailing"]
	if down == "" || failing == "" {
		t.Fatalf("alerts %v; want BatonOperatorDown and BatonWebhookCallsFailing", exprs)
	}
	if fors["BatonOperatorDown"] != "2m" || fors["BatonWebhookCallsFailing"] != "1m" {
		t.Errorf("for: %s and %s; want the defaults 2m and 1m of operatorDownFor and webhookRejectionsFor", fors["BatonOperatorDown"], fors["BatonWebhookCallsFailing"])
	}

	// prometheus-operator names a ServiceMonitor's targets' job after the Service (unless the
	// ServiceMonitor sets jobLabel) and gives them its namespace.
	svc := get[*corev1.Service](t, objs, "Service", "baton-operator-metrics")
	sm := get[map[string]any](t, objs, "ServiceMonitor", "baton-operator")
	if jl, ok := sm["spec"].(map[string]any)["jobLabel"]; ok {
		t.Fatalf("ServiceMonitor sets jobLabel %v: its targets' job is no longer the Service's name, which BatonOperatorDown selects", jl)
	}
	target := map[string]string{"job": svc.Name, "namespace": svc.Namespace, "instance": "10.0.0.1:8443", "pod": "baton-operator-7c9d-x"}
	up := absentOfUp(t, down)
	if !selects(up, target) {
		t.Errorf("BatonOperatorDown %q does not select the ServiceMonitor's targets %v", down, target)
	}
	for _, other := range []map[string]string{
		{"job": svc.Name, "namespace": "other-release"},
		{"job": "kube-state-metrics", "namespace": svc.Namespace},
	} {
		if selects(up, other) {
			t.Errorf("BatonOperatorDown %q selects another target, %v: it would stay silent while that one is up", down, other)
		}
	}
	_, own, _ := ruleExprs(t, "--set", "monitoring.prometheusRule.enabled=true", "--set", "monitoring.prometheusRule.operatorJob=my-baton")
	if !selects(absentOfUp(t, own["BatonOperatorDown"]), map[string]string{"job": "my-baton", "namespace": svc.Namespace}) {
		t.Errorf("BatonOperatorDown with operatorJob=my-baton: %q; want it to select that job", own["BatonOperatorDown"])
	}

	mwc := get[*admissionregistrationv1.MutatingWebhookConfiguration](t, objs, "MutatingWebhookConfiguration", "baton-inject")
	if len(mwc.Webhooks) != 1 {
		t.Fatalf("webhooks %d, want 1", len(mwc.Webhooks))
	}
	name := mwc.Webhooks[0].Name
	// The series the API server writes: its own code, observed once per kind of outcome.
	ctx := context.Background()
	admissionmetrics.Metrics.ObserveWebhookRejection(ctx, name, "admit", "CREATE", admissionmetrics.WebhookRejectionCallingWebhookError, 0)
	admissionmetrics.Metrics.ObserveWebhookRejection(ctx, name, "admit", "CREATE", admissionmetrics.WebhookRejectionAPIServerInternalError, 0)
	admissionmetrics.Metrics.ObserveWebhookRejection(ctx, name, "admit", "CREATE", admissionmetrics.WebhookRejectionNoError, 403)
	admissionmetrics.Metrics.ObserveWebhookRejection(ctx, "other.example.com", "admit", "CREATE", admissionmetrics.WebhookRejectionCallingWebhookError, 0)
	families, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	e, err := parser.ParseExpr(failing)
	if err != nil {
		t.Fatal(err)
	}
	var sel *parser.VectorSelector
	var by []string
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		switch n := n.(type) {
		case *parser.VectorSelector:
			sel = n
		case *parser.AggregateExpr:
			by = n.Grouping
		}
		return nil
	})
	if sel == nil {
		t.Fatalf("BatonWebhookCallsFailing %q selects no series", failing)
	}
	n := 0
	for _, f := range families {
		if f.GetName() != sel.Name {
			continue
		}
		for _, m := range f.GetMetric() {
			ls := map[string]string{}
			for _, l := range m.GetLabel() {
				ls[l.GetName()] = l.GetValue()
			}
			n++
			want := ls["name"] == name && ls["error_type"] != string(admissionmetrics.WebhookRejectionNoError)
			if got := selects(sel, ls); got != want {
				t.Errorf("BatonWebhookCallsFailing %q selects %v: %v, want %v", failing, ls, got, want)
			}
			for _, l := range by {
				if _, ok := ls[l]; !ok {
					t.Errorf("BatonWebhookCallsFailing %q groups by %s, which the API server's series %v lack", failing, l, ls)
				}
			}
		}
	}
	if n != 4 {
		t.Errorf("the API server's admission metrics wrote %d series of %s, want the 4 observed: the expression names a metric the API server does not write", n, sel.Name)
	}
}

// absentOfUp checks that expr is absent(up{...} == 1) and returns its selector.
func absentOfUp(t *testing.T, expr string) *parser.VectorSelector {
	t.Helper()
	e, err := parser.ParseExpr(expr)
	if err != nil {
		t.Fatal(err)
	}
	call, ok := e.(*parser.Call)
	if !ok || call.Func.Name != "absent" || len(call.Args) != 1 {
		t.Fatalf("%q; want absent(up{...} == 1): it must fire with no target at all too", expr)
	}
	cmp, ok := call.Args[0].(*parser.BinaryExpr)
	if !ok || cmp.Op != parser.EQLC || cmp.ReturnBool {
		t.Fatalf("%q; want absent(up{...} == 1)", expr)
	}
	sel, ok := cmp.LHS.(*parser.VectorSelector)
	one, ok2 := cmp.RHS.(*parser.NumberLiteral)
	if !ok || !ok2 || sel.Name != "up" || one.Val != 1 {
		t.Fatalf("%q; want absent(up{...} == 1)", expr)
	}
	return sel
}

// selects reports whether every label matcher of sel (its metric name aside) matches ls.
func selects(sel *parser.VectorSelector, ls map[string]string) bool {
	for _, m := range sel.LabelMatchers {
		if m.Name == "__name__" {
			continue
		}
		if !m.Matches(ls[m.Name]) {
			return false
		}
	}
	return true
}
