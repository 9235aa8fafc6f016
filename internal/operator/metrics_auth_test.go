package operator_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/baton-dev/baton/internal/testing/testenv"
	"github.com/baton-dev/baton/internal/testing/testpki"
)

// TestMetricsNeedAuthentication (issue 23, item 6): the operator's metrics endpoint answers only
// a client whose bearer token the API server authenticates (TokenReview) and authorizes for get
// on the non-resource URL /metrics (SubjectAccessReview), as Kubebuilder scaffolds it. Neither a
// request without a token (over plain HTTP or TLS) nor a token of a service account without that
// right reads a metric; a service account bound to a ClusterRole with that right does.
func TestMetricsNeedAuthentication(t *testing.T) {
	env := up(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ns := newNamespace(t, env, "metrics")

	for _, scheme := range []string{"http", "https"} {
		code, body, err := scrape(ctx, scheme+"://"+env.MetricsAddr+"/metrics", "")
		if err == nil && (code == http.StatusOK || strings.Contains(body, "controller_runtime_reconcile_total")) {
			t.Errorf("an unauthenticated scrape over %s answered %d with the metrics", scheme, code)
		} else {
			t.Logf("unauthenticated scrape over %s: %d, %v", scheme, code, err)
		}
	}
	url := "https://" + env.MetricsAddr + "/metrics"
	if code, _, err := scrape(ctx, url, ""); err != nil || code != http.StatusUnauthorized {
		t.Errorf("unauthenticated scrape over TLS: %d, %v; want 401", code, err)
	}
	// The endpoint serves the certificate of --metrics-cert-dir: a client that trusts its CA
	// verifies it, one that trusts another CA does not.
	for _, tc := range []struct {
		name   string
		ca     []byte
		verify bool
	}{{"the certificate's CA", shared.metricsCA, true}, {"another CA", testpki.NewCA(t).PEM, false}} {
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(tc.ca)
		conn, err := tls.Dial("tcp", env.MetricsAddr, &tls.Config{RootCAs: pool, ServerName: "localhost", MinVersion: tls.VersionTLS12})
		if err == nil {
			_ = conn.Close()
		}
		if verified := err == nil; verified != tc.verify {
			t.Errorf("TLS to the metrics endpoint trusting %s: %v; want verified %v", tc.name, err, tc.verify)
		}
	}

	// Two service accounts: one bound to a ClusterRole that may read /metrics, one not.
	for _, sa := range []string{"scraper", "stranger"} {
		if _, err := env.Kube.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	reader := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: ns + "-metrics-reader"},
		Rules: []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}}}
	if _, err := env.Kube.RbacV1().ClusterRoles().Create(ctx, reader, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: reader.Name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: reader.Name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "scraper"}}}
	if _, err := env.Kube.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	token := func(sa string) string {
		tr, err := env.Kube.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa,
			&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}

	// controller-runtime's filter answers a token the API server rejects with 500 "Authentication
	// failed" (the TokenReview reports an error), not 401: refused either way.
	if code, body, err := scrape(ctx, url, "not-a-token"); err != nil || code == http.StatusOK || strings.Contains(body, "controller_runtime") {
		t.Errorf("scrape with a bogus token: %d, %v; want a refusal (%.200s)", code, err, body)
	} else {
		t.Logf("scrape with a bogus token: %d %q", code, strings.TrimSpace(body))
	}
	if code, body, err := scrape(ctx, url, token("stranger")); err != nil || code != http.StatusForbidden {
		t.Errorf("scrape by a service account without get on /metrics: %d, %v; want 403 (%.200s)", code, err, body)
	}
	// RBAC takes a moment to see the new binding.
	scraper := token("scraper")
	var last string
	testenv.WaitFor(t, "an authorized scrape reading a metric", 30*time.Second, func() bool {
		code, body, err := scrape(ctx, url, scraper)
		last = fmt.Sprintf("%d, %v: %.200s", code, err, body)
		return err == nil && code == http.StatusOK && strings.Contains(body, `controller_runtime_reconcile_total{controller="distributedlock"`)
	})
	t.Logf("authorized scrape: %s", last)
}

// scrape GETs url with the bearer token (none if empty) and returns the status and body. TLS is
// not verified: the operator serves a certificate it made itself, as it does in a cluster unless
// given one.
func scrape(ctx context.Context, url, token string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // self-signed
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}
