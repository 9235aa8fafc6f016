package charts_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The operator's identity in the rendered chart.
const (
	operatorAccount = "baton-operator"
	operatorUser    = "system:serviceaccount:" + namespace + ":" + operatorAccount
)

// right is one thing the operator's service account may do: a verb on a resource (or a non-resource
// URL) of an API group, cluster-wide (scope "*") or in one namespace, on every object (name "") or
// on the one named.
type right struct {
	scope, group, resource, verb, name string
}

func (r right) String() string {
	s := fmt.Sprintf("%s %s/%s", r.verb, cmpOr(r.group, "core"), r.resource)
	if r.name != "" {
		s += " [" + r.name + "]"
	}
	if r.scope == "*" {
		return s + " in every namespace"
	}
	return s + " in namespace " + r.scope
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// allowed is what the operator may do, and why: the allow-list of issue 23, item 5. A right the
// chart grants that is not here fails TestOperatorRightsAllowList; add it only with a reason that
// survives a security review, and narrow it by resourceNames or an admission policy where
// Kubernetes allows.
var allowed = []struct {
	scope, group string
	resources    []string
	verbs        []string
	names        []string
	why          string
}{
	{"*", "", []string{"pods"}, []string{"get", "list", "watch"}, nil,
		"the reconcilers' cache of injected pods (RBAC cannot express its label selector)"},
	{"*", "", []string{"pods"}, []string{"patch"}, nil,
		"the superseded mark of a rollout hand-off (controllers/handoff.go); the ValidatingAdmissionPolicy baton-operator-pods " +
			"lets it change nothing but the annotation baton.dev/superseded of injected pods"},
	{"*", "", []string{"secrets"}, []string{"get"}, nil,
		"a DistributedLock's Cassandra credentials Secret, named by the lock (issue 23 item 3 narrows which)"},
	{"*", "admissionregistration.k8s.io", []string{"mutatingwebhookconfigurations"}, []string{"get", "list", "watch"}, nil,
		"the certificate rotator's cache (cert-controller watches every configuration)"},
	{"*", "admissionregistration.k8s.io", []string{"mutatingwebhookconfigurations"}, []string{"update"}, []string{"baton-inject"},
		"the rotator writes the caBundle of baton's own configuration"},
	{"*", "apps", []string{"deployments", "replicasets", "statefulsets"}, []string{"get", "list", "watch"}, nil,
		"RolloutSafe and the rollout hand-off read the workloads of locked pods"},
	{"*", "baton.dev", []string{"distributedlocks"}, []string{"get", "list", "watch", "update", "patch"}, nil,
		"baton's own resource (the revoke annotation is removed once done)"},
	{"*", "baton.dev", []string{"distributedlocks/status"}, []string{"get", "update", "patch"}, nil,
		"baton's own resource's status"},
	{"*", "events.k8s.io", []string{"events"}, []string{"create", "patch"}, nil,
		"Events on DistributedLocks"},
	{"*", "rbac.authorization.k8s.io", []string{"rolebindings"}, []string{"create"}, nil,
		"the sidecars' RoleBinding baton-sidecar (create cannot be limited by name; the ValidatingAdmissionPolicy " +
			"baton-operator-rolebindings allows only that name and the sidecar ClusterRoles)"},
	{"*", "rbac.authorization.k8s.io", []string{"rolebindings"}, []string{"get", "list", "watch", "update", "delete"}, []string{"baton-sidecar"},
		"the sidecars' RoleBinding, kept in line with the namespace's injected pods"},
	{"*", "rbac.authorization.k8s.io", []string{"clusterroles"}, []string{"bind"}, []string{"baton-sidecar", "baton-sidecar-label"},
		"binding the sidecar ClusterRoles without holding their rights (no escalate, no write on Roles)"},
	{"*", "authentication.k8s.io", []string{"tokenreviews"}, []string{"create"}, nil,
		"authenticating each scrape of the metrics endpoint (issue 23 item 6)"},
	{"*", "authorization.k8s.io", []string{"subjectaccessreviews"}, []string{"create"}, nil,
		"authorizing each scrape of the metrics endpoint (issue 23 item 6)"},
	{namespace, "coordination.k8s.io", []string{"leases"}, []string{"get", "list", "watch", "create", "update", "patch", "delete"}, nil,
		"leader election, in the release namespace only"},
	{namespace, "", []string{"events"}, []string{"create", "patch"}, nil, "leader-election Events"},
	{namespace, "events.k8s.io", []string{"events"}, []string{"create", "patch"}, nil, "leader-election Events"},
	{namespace, "", []string{"secrets"}, []string{"get", "list", "watch"}, nil,
		"the webhook certificate Secret (the rotator's cache watches the release namespace's Secrets)"},
	{namespace, "", []string{"secrets"}, []string{"update"}, []string{"baton-webhook-tls"},
		"the rotator writes the webhook certificate"},
}

// allowedRights flattens allowed.
func allowedRights() map[right]string {
	out := map[right]string{}
	for _, a := range allowed {
		names := a.names
		if len(names) == 0 {
			names = []string{""}
		}
		for _, res := range a.resources {
			for _, v := range a.verbs {
				for _, n := range names {
					out[right{a.scope, a.group, res, v, n}] = a.why
				}
			}
		}
	}
	return out
}

// flatten turns rules granted in scope into rights; a rule with a wildcard or a non-resource URL
// becomes a right that no allow-list entry matches.
func flatten(scope string, rules []rbacv1.PolicyRule) []right {
	var out []right
	for _, r := range rules {
		names := r.ResourceNames
		if len(names) == 0 {
			names = []string{""}
		}
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					for _, n := range names {
						out = append(out, right{scope, g, res, v, n})
					}
				}
			}
		}
		for _, u := range r.NonResourceURLs {
			for _, v := range r.Verbs {
				out = append(out, right{scope, "nonResourceURL", u, v, ""})
			}
		}
	}
	return out
}

// renderedRights returns the rights the rendered chart grants the operator's service account,
// failing on a binding to a role the chart does not render (a built-in role's rules are not in
// the manifest, and would escape the allow-list).
func renderedRights(t *testing.T, objs map[string]object) map[right]bool {
	t.Helper()
	isOperator := func(subjects []rbacv1.Subject) bool {
		return slices.ContainsFunc(subjects, func(s rbacv1.Subject) bool {
			return (s.Kind == rbacv1.ServiceAccountKind && s.Namespace == namespace && s.Name == operatorAccount) ||
				(s.Kind == rbacv1.UserKind && s.Name == operatorUser) ||
				(s.Kind == rbacv1.GroupKind && (s.Name == "system:serviceaccounts" || s.Name == "system:serviceaccounts:"+namespace || s.Name == "system:authenticated"))
		})
	}
	rules := func(ref rbacv1.RoleRef, ns string) []rbacv1.PolicyRule {
		o, ok := objs[ref.Kind+"/"+ref.Name]
		if !ok || (ref.Kind == "Role" && o.namespace != ns) {
			t.Errorf("a binding of the operator names %s %s, which the chart does not render: its rights cannot be checked", ref.Kind, ref.Name)
			return nil
		}
		switch r := o.obj.(type) {
		case *rbacv1.ClusterRole:
			if r.AggregationRule != nil {
				t.Errorf("ClusterRole %s aggregates other roles: its rights cannot be checked", r.Name)
			}
			return r.Rules
		case *rbacv1.Role:
			return r.Rules
		}
		t.Errorf("%s %s decoded as %T", ref.Kind, ref.Name, o.obj)
		return nil
	}
	got := map[right]bool{}
	for _, o := range objs {
		switch b := o.obj.(type) {
		case *rbacv1.ClusterRoleBinding:
			if isOperator(b.Subjects) {
				for _, r := range flatten("*", rules(b.RoleRef, "")) {
					got[r] = true
				}
			}
		case *rbacv1.RoleBinding:
			if isOperator(b.Subjects) {
				for _, r := range flatten(b.Namespace, rules(b.RoleRef, b.Namespace)) {
					got[r] = true
				}
			}
		}
	}
	return got
}

// compareRights reports every right in got that the allow-list lacks, and every allowed right
// that is no longer granted (the list must say what the operator holds, no more).
func compareRights(t *testing.T, what string, got map[right]bool, allow map[right]string) {
	t.Helper()
	var extra, missing []string
	for r := range got {
		if _, ok := allow[r]; !ok {
			extra = append(extra, r.String())
		}
	}
	for r := range allow {
		if !got[r] {
			missing = append(missing, r.String())
		}
	}
	slices.Sort(extra)
	slices.Sort(missing)
	if len(extra) > 0 {
		t.Errorf("%s grants the operator rights that are not in the allow-list (charts/rbac_test.go, allowed):\n  %s",
			what, strings.Join(extra, "\n  "))
	}
	if len(missing) > 0 {
		t.Errorf("%s no longer grants these allowed rights; remove them from the allow-list:\n  %s", what, strings.Join(missing, "\n  "))
	}
}

// TestOperatorRightsAllowList renders the chart with the defaults and the other supported setups
// and lists what its RBAC lets the operator's service account do (issue 23, item 5). Any right
// outside the explicit allow-list fails the test, and so does a broad right the list must never
// hold, whatever it says.
func TestOperatorRightsAllowList(t *testing.T) {
	allow := allowedRights()
	for r := range allow {
		if broad := broadRight(r); broad != "" {
			t.Errorf("the allow-list holds %s: %s", r, broad)
		}
	}
	for _, values := range [][]string{
		nil,
		{"--set", "webhook.certs=certManager"},
		{"--set", "metrics.enabled=false"},
		{"--set", "monitoring.serviceMonitor.enabled=true", "--set", "sidecarAccessPolicy.enabled=false"},
	} {
		what := fmt.Sprintf("helm template %v", values)
		got := renderedRights(t, decode(t, template(t, values...)))
		compareRights(t, what, got, allow)
		for r := range got {
			if broad := broadRight(r); broad != "" {
				t.Errorf("%s grants %s: %s", what, r, broad)
			}
		}
	}
}

// broadRight says why r is too broad for the operator whatever the allow-list says, or "".
func broadRight(r right) string {
	switch {
	case r.group == "*" || r.resource == "*" || r.verb == "*":
		return "a wildcard"
	case r.verb == "escalate" || r.verb == "impersonate":
		return "lets the operator grant or assume rights it does not hold"
	case r.verb == "bind" && r.name == "":
		return "bind on any role"
	case r.group == "rbac.authorization.k8s.io" && (r.resource == "roles" || r.resource == "clusterroles") && r.verb != "bind" &&
		!slices.Contains([]string{"get", "list", "watch"}, r.verb):
		return "writes roles: the sidecars' rules are fixed ClusterRoles the operator binds"
	case r.group == "rbac.authorization.k8s.io" && r.resource == "clusterrolebindings" && !slices.Contains([]string{"get", "list", "watch"}, r.verb):
		return "writes cluster-wide bindings"
	case r.group == "admissionregistration.k8s.io" && !slices.Contains([]string{"get", "list", "watch"}, r.verb) && r.name == "":
		return "writes admission configurations other than baton's own"
	case r.group == "" && strings.HasPrefix(r.resource, "pods/") && r.resource != "pods/status":
		return "a pod subresource (exec, attach, ephemeral containers, eviction, ...)"
	case r.group == "" && r.resource == "pods/status":
		return "writes the status (readiness) of every pod"
	case r.group == "" && r.resource == "secrets" && r.scope == "*" && r.verb != "get":
		return "lists, watches or writes every Secret of the cluster"
	case r.group == "" && (r.resource == "nodes" || r.resource == "serviceaccounts/token" || r.resource == "serviceaccounts"):
		return "nodes or service-account credentials"
	case r.group == "nonResourceURL":
		return "a non-resource URL"
	}
	return ""
}

// TestOperatorRightsOnAPIServer installs the RBAC and admission policies of the default render on
// a real API server and asks it, as the operator's service account, what that account may do
// (SelfSubjectRulesReview, in the release namespace and in kube-system): the same allow-list as
// TestOperatorRightsAllowList. Then it tries what least privilege must forbid: swapping the image of
// a pod in kube-system, changing any pod metadata but baton's superseded mark, writing a Role,
// binding a role other than the sidecars', and writing another webhook configuration.
func TestOperatorRightsOnAPIServer(t *testing.T) {
	objs := decode(t, template(t))
	cfg := kube.Config(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	admin, err := client.New(cfg, client.Options{Scheme: newScheme(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	for _, key := range slices.Sorted(maps.Keys(objs)) {
		kind := objs[key].gvk.Kind
		if !slices.Contains([]string{"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding",
			"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}, kind) {
			continue
		}
		o := objs[key].obj.(client.Object)
		if err := admin.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("installing %s: %v", key, err)
		}
	}
	opCfg := rest.CopyConfig(cfg)
	opCfg.Impersonate = rest.ImpersonationConfig{UserName: operatorUser}
	asOperator := kubernetes.NewForConfigOrDie(opCfg)
	// What every service account of the namespace may do (discovery, self reviews), from a service
	// account that nothing binds: not the operator's own.
	nobodyCfg := rest.CopyConfig(cfg)
	nobodyCfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + namespace + ":nobody"}
	asNobody := kubernetes.NewForConfigOrDie(nobodyCfg)

	allow := allowedRights()
	for _, ns := range []string{"kube-system", namespace} {
		base := reviewRights(ctx, t, asNobody, ns)
		got := map[right]bool{}
		for r := range reviewRights(ctx, t, asOperator, ns) {
			if base[r] {
				continue
			}
			// The review answers per namespace: a cluster-wide right appears in each, and a right
			// granted both cluster-wide and in the namespace appears once.
			cluster := right{"*", r.group, r.resource, r.verb, r.name}
			_, inCluster := allow[cluster]
			_, inNamespace := allow[r]
			if inCluster {
				got[cluster] = true
			}
			if inNamespace || !inCluster {
				got[r] = true
			}
		}
		want := map[right]string{}
		for r, why := range allow {
			if r.scope == "*" || r.scope == ns {
				want[r] = why
			}
		}
		compareRights(t, "the API server's SelfSubjectRulesReview in namespace "+ns, got, want)
	}

	// An injected pod and a plain pod in kube-system, and a webhook configuration of someone else.
	mkPod := func(name string, injected bool) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: name, Labels: map[string]string{"app": "x"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}}}}
		if injected {
			p.Labels["baton.dev/injected"] = "true"
		}
		if err := admin.Create(ctx, p); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		return p
	}
	injected, plain := mkPod("rights-injected", true), mkPod("rights-plain", false)
	patch := func(p *corev1.Pod, body string) error {
		_, err := asOperator.CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, types.MergePatchType, []byte(body), metav1.PatchOptions{})
		return err
	}
	const superseded = `{"metadata":{"annotations":{"baton.dev/superseded":"revision 1 of Deployment/x superseded"}}}`
	// The policy takes effect a moment after it is created.
	var last error
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		last = patch(plain, `{"spec":{"containers":[{"name":"app","image":"registry.example/evil:1"}]}}`)
		return last != nil && strings.Contains(last.Error(), "baton-operator-pods"), nil
	})
	if err != nil {
		t.Errorf("the operator swapping the image of pod kube-system/%s: %v; want a denial by the policy baton-operator-pods", plain.Name, last)
	}
	for _, c := range []struct {
		what  string
		pod   *corev1.Pod
		body  string
		allow bool
	}{
		{"mark an injected pod superseded", injected, superseded, true},
		{"remove the mark", injected, `{"metadata":{"annotations":{"baton.dev/superseded":null}}}`, true},
		{"mark a pod that is not injected", plain, superseded, false},
		{"set another annotation", injected, `{"metadata":{"annotations":{"example.com/x":"y"}}}`, false},
		{"change a label", injected, `{"metadata":{"labels":{"app":"y"}}}`, false},
		{"remove baton's injected label", injected, `{"metadata":{"labels":{"baton.dev/injected":null}}}`, false},
		{"swap the image of an injected pod", injected, `{"spec":{"containers":[{"name":"app","image":"registry.example/evil:1"}]}}`, false},
		{"add a finalizer", injected, `{"metadata":{"finalizers":["example.com/block"]}}`, false},
	} {
		err := patch(c.pod, c.body)
		if c.allow && err != nil {
			t.Errorf("the operator may %s: %v", c.what, err)
		}
		if !c.allow && (err == nil || !strings.Contains(err.Error(), "baton-operator-pods")) {
			t.Errorf("the operator could %s (%s on pod %s): %v; want a denial by the policy baton-operator-pods", c.what, c.body, c.pod.Name, err)
		}
	}

	if _, err := asOperator.RbacV1().Roles("kube-system").Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "baton-sidecar"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"patch"}}}}, metav1.CreateOptions{}); err == nil {
		t.Error("the operator could create a Role in kube-system")
	}
	sidecarAccount := rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: "kube-system", Name: "default"}
	binding := func(name string, ref rbacv1.RoleRef, subjects ...rbacv1.Subject) error {
		rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name}, RoleRef: ref, Subjects: subjects}
		_, err := asOperator.RbacV1().RoleBindings("kube-system").Create(ctx, rb, metav1.CreateOptions{})
		if err == nil {
			_ = asOperator.RbacV1().RoleBindings("kube-system").Delete(ctx, name, metav1.DeleteOptions{})
		}
		return err
	}
	clusterRole := func(name string) rbacv1.RoleRef {
		return rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name}
	}
	if err := binding("baton-sidecar", clusterRole("baton-sidecar-label"), sidecarAccount); err != nil {
		t.Errorf("the operator binding the sidecar ClusterRole: %v", err)
	}
	for _, c := range []struct {
		name    string
		ref     rbacv1.RoleRef
		subject rbacv1.Subject
	}{
		{"baton-sidecar", clusterRole("admin"), sidecarAccount},
		{"baton-sidecar", clusterRole("view"), sidecarAccount},
		{"other", clusterRole("baton-sidecar"), sidecarAccount},
		{"baton-sidecar", clusterRole("baton-operator"), sidecarAccount},
		{"baton-sidecar", clusterRole("baton-sidecar"), rbacv1.Subject{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "system:authenticated"}},
		{"baton-sidecar", clusterRole("baton-sidecar"), rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: namespace, Name: operatorAccount}},
	} {
		if err := binding(c.name, c.ref, c.subject); err == nil {
			t.Errorf("the operator could bind ClusterRole %s as RoleBinding %s in kube-system to %s %s", c.ref.Name, c.name, c.subject.Kind, c.subject.Name)
		} else {
			t.Logf("binding ClusterRole %s as %s to %s %s: %v", c.ref.Name, c.name, c.subject.Kind, c.subject.Name, err)
		}
	}

	for _, name := range []string{"baton-inject", "someone-else"} {
		// Configurations without webhooks: they change no admission.
		mwc := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if err := admin.Create(ctx, mwc); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			got, err := asOperator.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			got.Labels = map[string]string{"touched-by": "operator"}
			_, err = asOperator.AdmissionregistrationV1().MutatingWebhookConfigurations().Update(ctx, got, metav1.UpdateOptions{})
			return err
		})
		if name == "baton-inject" && err != nil {
			t.Errorf("the operator updating its webhook configuration: %v", err)
		}
		if name != "baton-inject" && err == nil {
			t.Errorf("the operator could update the MutatingWebhookConfiguration %s", name)
		}
	}
}

// reviewRights asks the API server what cs's user may do in namespace ns.
func reviewRights(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns string) map[right]bool {
	t.Helper()
	rev, err := cs.AuthorizationV1().SelfSubjectRulesReviews().Create(ctx,
		&authorizationv1.SelfSubjectRulesReview{Spec: authorizationv1.SelfSubjectRulesReviewSpec{Namespace: ns}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rev.Status.Incomplete {
		t.Fatalf("SelfSubjectRulesReview in %s incomplete: %s", ns, rev.Status.EvaluationError)
	}
	out := map[right]bool{}
	var rules []rbacv1.PolicyRule
	for _, r := range rev.Status.ResourceRules {
		rules = append(rules, rbacv1.PolicyRule{Verbs: r.Verbs, APIGroups: r.APIGroups, Resources: r.Resources, ResourceNames: r.ResourceNames})
	}
	for _, r := range rev.Status.NonResourceRules {
		rules = append(rules, rbacv1.PolicyRule{Verbs: r.Verbs, NonResourceURLs: r.NonResourceURLs})
	}
	for _, r := range flatten(ns, rules) {
		out[r] = true
	}
	return out
}
