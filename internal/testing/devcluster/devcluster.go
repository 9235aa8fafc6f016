// Package devcluster runs baton's operator on a local control plane the way the Helm chart runs it
// in a cluster: as its own service account with the generated ClusterRole and the chart's
// namespace Role, with the sidecar admission policy installed, the webhook configured and its
// certificate made by the operator, and a node agent (internal/testing/nodeagent) running the sidecars of
// injected pods. `make demo` and the operator's end-to-end tests use it.
package devcluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/baton-dev/baton/internal/build/imagebuild"
	"github.com/baton-dev/baton/internal/operator"
	"github.com/baton-dev/baton/internal/testing/freeport"
	"github.com/baton-dev/baton/internal/testing/localkube"
	"github.com/baton-dev/baton/internal/testing/manifests"
	"github.com/baton-dev/baton/internal/testing/nodeagent"
	"github.com/baton-dev/baton/internal/webhook"
)

// Names the chart uses.
const (
	Namespace       = "baton-system"
	OperatorAccount = "baton-operator"
	webhookSecret   = "baton-webhook-tls"
	webhookConfig   = "baton-inject"
)

// Options configure a Cluster.
type Options struct {
	// Server is the admin configuration of a running kube-apiserver with baton's CRD installed.
	Server *rest.Config
	// RepoRoot is the repository checkout, for config/rbac and config/policy.
	RepoRoot string
	// CassandraHosts and Keyspace are the operator's default lock store.
	CassandraHosts []string
	Keyspace       string
	// OperatorArgs are more operator flags (e.g. --status-interval=1s).
	OperatorArgs []string
	// Log receives the operator's and the node agent's logs.
	Log logr.Logger
	// SidecarOutput returns where the sidecar of pod "namespace/name" logs (nil: discarded).
	SidecarOutput func(pod string) io.Writer
	// SidecarBinary is a sidecar built by BuildSidecar, which the caller keeps until Stop. Empty:
	// Start builds one itself, within its ctx.
	SidecarBinary string
}

// Cluster is a running operator and node agent.
type Cluster struct {
	Client     client.Client
	Kube       kubernetes.Interface
	Agent      *nodeagent.Agent
	Kubeconfig string // admin kubeconfig file, e.g. for kubectl
	ProbeAddr  string // the operator's /healthz and /readyz
	// MetricsAddr serves the operator's Prometheus metrics at https://MetricsAddr/metrics, to a
	// bearer token allowed get on /metrics (Metrics uses one).
	MetricsAddr string

	dir       string
	cancel    context.CancelFunc
	opDone    chan struct{}
	opErr     error
	agentDone chan struct{}
}

// Start builds the sidecar (unless o.SidecarBinary names one), installs RBAC, policy, webhook
// configuration and Secret, starts the operator and the node agent, and returns once the operator
// is ready (certificate made, webhook serving). Stop it when done.
func Start(ctx context.Context, o Options) (*Cluster, error) {
	scheme, err := operator.Scheme()
	if err != nil {
		return nil, err
	}
	c, err := client.New(o.Server, client.Options{Scheme: scheme})
	if err != nil {
		return nil, err
	}
	kc, err := kubernetes.NewForConfig(o.Server)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "baton-devcluster")
	if err != nil {
		return nil, err
	}
	cl := &Cluster{Client: c, Kube: kc, dir: dir}
	fail := func(err error) (*Cluster, error) {
		cl.Stop()
		return nil, err
	}
	sidecarBinary := o.SidecarBinary
	if sidecarBinary == "" {
		sidecarBinary = filepath.Join(dir, "sidecar")
		if err := BuildSidecar(ctx, o.RepoRoot, sidecarBinary); err != nil {
			return fail(err)
		}
	}
	cl.Kubeconfig = filepath.Join(dir, "kubeconfig")
	if err := localkube.WriteKubeconfig(o.Server, cl.Kubeconfig); err != nil {
		return fail(err)
	}
	if err := install(ctx, c, scheme, o.RepoRoot); err != nil {
		return fail(err)
	}
	var ports [3]int
	for i := range ports {
		p, err := freeport.Port("127.0.0.1")
		if err != nil {
			return fail(err)
		}
		ports[i] = p
	}
	webhookPort, probePort, metricsPort := ports[0], ports[1], ports[2]
	// The chart's configuration names a Service; a local webhook is reached by URL, with a
	// certificate that also names localhost. The operator fills in the caBundle.
	mwc := webhook.MutatingWebhookConfigurationForURL(webhookConfig, fmt.Sprintf("https://localhost:%d%s", webhookPort, webhook.Path), nil)
	if err := c.Create(ctx, mwc); err != nil && !apierrors.IsAlreadyExists(err) {
		return fail(fmt.Errorf("creating the MutatingWebhookConfiguration: %w", err))
	}
	certDir := filepath.Join(dir, "webhook-certs")
	if err := os.MkdirAll(certDir, 0o700); err != nil {
		return fail(err)
	}
	cl.ProbeAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(probePort))
	cl.MetricsAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(metricsPort))
	args := append([]string{
		"--namespace=" + Namespace,
		"--sidecar-image=" + imagebuild.BatonTag, // what make image builds; the node agent runs the binary itself
		"--cassandra-hosts=" + strings.Join(o.CassandraHosts, ","),
		"--cassandra-keyspace=" + o.Keyspace,
		// The local Cassandra runs without authentication, often on one node.
		"--cassandra-allow-anonymous",
		"--cassandra-schema-replication={'class': 'SimpleStrategy', 'replication_factor': 1}", "--cassandra-allow-single-replica",
		"--webhook-port=" + strconv.Itoa(webhookPort),
		"--webhook-cert-dir=" + certDir,
		"--webhook-extra-dns-names=localhost",
		"--metrics-bind-address=" + cl.MetricsAddr,
		"--health-probe-bind-address=" + cl.ProbeAddr,
	}, o.OperatorArgs...)
	opts, err := operator.ParseOptions(args, func(string) string { return "" })
	if err != nil {
		return fail(err)
	}
	opts.SharedProcess = true // a test may run a Cluster per control plane

	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	cl.cancel = cancel
	// The kubelet's part: the injected pods' sidecars. (The operator writes its webhook
	// certificate files itself: see internal/certfiles.)
	cl.Agent, err = nodeagent.New(nodeagent.Config{Client: kc, Server: o.Server, SidecarBinary: sidecarBinary,
		Dir: filepath.Join(dir, "pods"), Output: o.SidecarOutput, Log: o.Log.WithName("nodeagent")})
	if err != nil {
		return fail(err)
	}
	cl.agentDone = make(chan struct{})
	go func() {
		cl.Agent.Run(runCtx)
		close(cl.agentDone)
	}()
	// The operator runs as its service account: a missing RBAC marker shows up here.
	opCfg := rest.CopyConfig(o.Server)
	opCfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + Namespace + ":" + OperatorAccount}
	// No client-side rate limit of the test's own (envtest's 1000 per second), as a kubeconfig or
	// the in-cluster configuration carries none: the operator's --kube-api-qps and --kube-api-burst
	// decide, as in a cluster.
	opCfg.QPS, opCfg.Burst = 0, 0
	cl.opDone = make(chan struct{})
	go func() {
		cl.opErr = operator.Run(runCtx, opts, opCfg, o.Log.WithName("operator"))
		close(cl.opDone)
	}()

	deadline := time.Now().Add(2 * time.Minute)
	for {
		select {
		case <-cl.opDone:
			return fail(fmt.Errorf("operator exited: %w", cl.opErr))
		case <-ctx.Done():
			return fail(ctx.Err())
		default:
		}
		if probe(cl.ProbeAddr, "/readyz") == http.StatusOK {
			return cl, nil
		}
		if time.Now().After(deadline) {
			return fail(errors.New("operator not ready after 2m"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// BuildSidecar builds cmd/sidecar of the checkout at repoRoot into the file out. Callers with a
// deadline for Start build it first with a bound of its own: with an empty Go build cache the build
// takes minutes.
func BuildSidecar(ctx context.Context, repoRoot, out string) error {
	build := exec.CommandContext(ctx, "go", "build", "-o", out, "./cmd/sidecar")
	build.Dir = repoRoot
	if output, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("building the sidecar: %w\n%s", err, output)
	}
	return nil
}

// Stop stops the operator and the node agent (which stops every sidecar) and removes files.
func (c *Cluster) Stop() {
	if c.cancel != nil {
		c.cancel()
		if c.opDone != nil {
			select {
			case <-c.opDone:
			case <-time.After(30 * time.Second):
			}
		}
		if c.agentDone != nil {
			<-c.agentDone
		}
	}
	os.RemoveAll(c.dir)
}

// Metrics scrapes the operator's metrics as Prometheus would with the chart's ServiceMonitor: over
// TLS (not verified: the operator's certificate is self-signed), with the token of the service
// account MetricsReader in Namespace, which install binds to a ClusterRole allowing get on
// /metrics. It returns the body of a 200 answer.
func (c *Cluster) Metrics(ctx context.Context) (string, error) {
	tr, err := c.Kube.CoreV1().ServiceAccounts(Namespace).CreateToken(ctx, MetricsReader,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)}}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("token of %s: %w", MetricsReader, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+c.MetricsAddr+"/metrics", nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("Authorization", "Bearer "+tr.Status.Token)
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // self-signed
	resp, err := hc.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET /metrics: %s: %.200s", resp.Status, body)
	}
	return string(body), nil
}

// MetricsReader is the service account Metrics scrapes with.
const MetricsReader = "metrics-reader"

// Probe returns the status code of the operator's health endpoint path (0 when unreachable).
func (c *Cluster) Probe(path string) int { return probe(c.ProbeAddr, path) }

// CreateNamespace creates namespace ns with service account "worker" for its pods.
func (c *Cluster) CreateNamespace(ctx context.Context, ns string) error {
	_, err := c.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	_, err = c.Kube.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: AppAccount}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

// AppAccount is the service account CreateNamespace makes for the app pods.
const AppAccount = "worker"

// install creates what the chart installs around the operator: the generated ClusterRole bound to
// the operator's service account, the Role in its namespace (the rules of
// charts/baton/templates/rbac.yaml), the sidecars' ClusterRoles, the empty webhook Secret and the
// admission policies (the sidecars' and the operator's).
func install(ctx context.Context, c client.Client, scheme *runtime.Scheme, root string) error {
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	var objs []client.Object
	for _, path := range []string{"config/rbac/role.yaml", "config/sidecar/clusterroles.yaml",
		"config/policy/sidecar-own-pod.yaml", "config/policy/operator-scope.yaml"} {
		decoded, err := manifests.Decode(scheme, filepath.Join(root, path))
		if err != nil {
			return err
		}
		for _, o := range decoded {
			objs = append(objs, o.(client.Object))
		}
	}
	account := rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: Namespace, Name: OperatorAccount}
	objs = append(objs,
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: OperatorAccount}},
		&rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "baton-operator"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "baton-operator"},
			Subjects:   []rbacv1.Subject{account},
		},
		&rbacv1.Role{
			ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: "baton-operator"},
			Rules: []rbacv1.PolicyRule{
				{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
				{APIGroups: []string{"", "events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
				{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "list", "watch"}},
				{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{webhookSecret}, Verbs: []string{"update"}},
			},
		},
		&rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: "baton-operator"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "baton-operator"},
			Subjects:   []rbacv1.Subject{account},
		},
		// A scraper of the metrics, with the chart's ClusterRole baton-metrics-reader.
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: MetricsReader}},
		&rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{Name: "baton-metrics-reader"},
			Rules:      []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}},
		},
		&rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "baton-metrics-reader"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "baton-metrics-reader"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: Namespace, Name: MetricsReader}},
		},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: webhookSecret}, Type: corev1.SecretTypeTLS,
			Data: map[string][]byte{corev1.TLSCertKey: nil, corev1.TLSPrivateKeyKey: nil}})
	for _, o := range objs {
		if err := c.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("installing %T %s: %w", o, o.GetName(), err)
		}
	}
	return nil
}

func probe(addr, path string) int {
	resp, err := http.Get("http://" + addr + path)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}
