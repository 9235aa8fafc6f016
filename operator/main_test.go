package operator_test

// These tests run the operator in-process against a real kube-apiserver and etcd (envtest, built
// from Go modules by localkube) and a real Cassandra node, with real sidecar processes started
// from the pods the operator's webhook injected. There is no kubelet: the test mirrors the webhook
// Secret into the certificate directory (as a Secret volume would) and runs each sidecar as a
// local process with the environment the webhook gave it.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/baton-dev/baton/controllers/webhook"
	"github.com/baton-dev/baton/internal/localcassandra"
	"github.com/baton-dev/baton/internal/nodeagent"
	"github.com/baton-dev/baton/internal/testenv"
	"github.com/baton-dev/baton/operator"
)

const (
	operatorNamespace = "baton-system"
	operatorAccount   = "baton-operator"
	// appAccount is the service account of the test pods (and so of their sidecars).
	appAccount = "worker"
	keyspace   = "baton_operator"
	// globalNamespace is the one namespace the test operator allows scope Global in.
	globalNamespace = "shared-locks"
)

var (
	kube      = testenv.NewKubeWithCRDs(filepath.Join("..", "config", "crd", "bases"))
	cassandra = testenv.NewCassandra(func() localcassandra.Config {
		c := localcassandra.Single()
		c.Name, c.NativePort, c.StoragePort = "operator-single", 9942, 7950
		return c
	}())
	sidecarBinary string
	operatorLog   = &testenv.SyncBuffer{}
	sidecarLog    = &testenv.SyncBuffer{}
	shared        sharedOperator
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "baton-operator-test")
	if err != nil {
		panic(err)
	}
	sidecarBinary = filepath.Join(dir, "sidecar")
	if out, err := exec.Command("go", "build", "-o", sidecarBinary, "../cmd/sidecar").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building the sidecar: %v\n%s", err, out)
		os.Exit(1)
	}
	// controller-runtime's package-level logger (used by the certificate rotator), as main sets it.
	ctrl.SetLogger(funcr.NewJSON(func(s string) { fmt.Fprintln(operatorLog, s) }, funcr.Options{LogTimestamp: true}))
	code := m.Run()
	shared.stop()
	cassandra.Stop()
	kube.Stop()
	os.RemoveAll(dir)
	if code != 0 {
		fmt.Fprintf(os.Stderr, "operator log:\n%s\nsidecar logs:\n%s\n", operatorLog.String(), sidecarLog.String())
	}
	os.Exit(code)
}

// sharedOperator is one operator for the whole test binary.
type sharedOperator struct {
	once      sync.Once
	env       *operatorEnv
	err       error
	cancel    context.CancelFunc
	done      chan struct{} // closed when Run returned, with runErr set
	runErr    error
	agentDone chan struct{}
}

// operatorEnv is what tests need to talk to the running operator's world.
type operatorEnv struct {
	cfg        *rest.Config
	kube       kubernetes.Interface
	client     client.Client
	cassandra  []string // contact points
	probeAddr  string
	kubeconfig string
	agent      *nodeagent.Agent
}

func (s *sharedOperator) stop() {
	if s.cancel == nil {
		return
	}
	s.cancel()
	select {
	case <-s.done:
		if s.runErr != nil {
			fmt.Fprintf(os.Stderr, "operator: %v\n", s.runErr)
		}
	case <-time.After(30 * time.Second):
		fmt.Fprintln(os.Stderr, "operator did not stop within 30s")
	}
	if s.agentDone != nil {
		<-s.agentDone
	}
}

// prefixWriter writes each Write to w with a prefix (sidecar logs are whole lines).
type prefixWriter struct {
	prefix string
	w      io.Writer
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	if _, err := p.w.Write(append([]byte(p.prefix), b...)); err != nil {
		return 0, err
	}
	return len(b), nil
}

// up starts the operator on first use and returns its environment.
func up(t *testing.T) *operatorEnv {
	t.Helper()
	cfg := kube.Config(t)
	hosts := cassandra.Cluster(t).Hosts()
	shared.once.Do(func() { shared.env, shared.err = shared.start(t, cfg, hosts) })
	if shared.err != nil {
		t.Fatalf("starting the operator: %v\noperator log:\n%s", shared.err, operatorLog.String())
	}
	return shared.env
}

func (s *sharedOperator) start(t *testing.T, cfg *rest.Config, hosts []string) (*operatorEnv, error) {
	scheme, err := operator.Scheme()
	if err != nil {
		return nil, err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, err
	}
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	ctx := context.Background()
	if _, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: operatorNamespace}},
		metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	if err := installRBACAndPolicy(ctx, c, scheme); err != nil {
		return nil, err
	}
	webhookPort, probePort := freePort(t), freePort(t)
	certDir, err := os.MkdirTemp("", "baton-webhook-certs")
	if err != nil {
		return nil, err
	}
	// The chart ships this configuration with a Service reference; the test server is reached by
	// URL. The operator fills in the caBundle.
	mwc := webhook.MutatingWebhookConfigurationForURL("baton-inject",
		fmt.Sprintf("https://localhost:%d%s", webhookPort, webhook.Path), nil)
	if err := c.Create(ctx, mwc); err != nil {
		return nil, fmt.Errorf("creating the MutatingWebhookConfiguration: %w", err)
	}
	opts, err := operator.ParseOptions([]string{
		"--namespace=" + operatorNamespace,
		"--sidecar-image=ghcr.io/baton-dev/baton:test",
		"--cassandra-hosts=" + hosts[0],
		"--cassandra-keyspace=" + keyspace,
		"--webhook-port=" + strconv.Itoa(webhookPort),
		"--webhook-cert-dir=" + certDir,
		"--webhook-extra-dns-names=localhost",
		"--metrics-bind-address=0",
		"--health-probe-bind-address=" + net.JoinHostPort("127.0.0.1", strconv.Itoa(probePort)),
		"--status-interval=1s",
		"--global-namespaces=" + globalNamespace,
	}, func(string) string { return "" })
	if err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(context.Background())
	s.cancel, s.done = cancel, make(chan struct{})
	// The kubelet's parts: the webhook Secret volume, and the injected pods' sidecars.
	go nodeagent.MirrorSecret(runCtx, kc, operatorNamespace, opts.WebhookSecret, certDir)
	agent, err := nodeagent.New(nodeagent.Config{Client: kc, Server: cfg, SidecarBinary: sidecarBinary, Dir: certDir,
		Output: func(pod string) io.Writer { return &prefixWriter{prefix: pod + ": ", w: sidecarLog} },
		Log:    funcr.NewJSON(func(s string) { fmt.Fprintln(operatorLog, s) }, funcr.Options{}).WithName("nodeagent")})
	if err != nil {
		cancel()
		return nil, err
	}
	s.agentDone = make(chan struct{})
	go func() {
		agent.Run(runCtx)
		close(s.agentDone)
	}()
	log := funcr.NewJSON(func(s string) { fmt.Fprintln(operatorLog, s) }, funcr.Options{LogTimestamp: true, Verbosity: 1})
	// The operator runs as its service account, with only the generated ClusterRole and the
	// namespace Role the chart grants: a missing RBAC marker fails these tests.
	opCfg := rest.CopyConfig(cfg)
	opCfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + operatorNamespace + ":" + operatorAccount}
	go func() {
		s.runErr = operator.Run(runCtx, opts, opCfg, log)
		close(s.done)
	}()

	env := &operatorEnv{cfg: cfg, kube: kc, client: c, cassandra: hosts, agent: agent,
		probeAddr: net.JoinHostPort("127.0.0.1", strconv.Itoa(probePort)), kubeconfig: testenv.WriteKubeconfig(t, cfg)}
	// Ready means the certificate exists, the caBundle is injected and the webhook serves.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		select {
		case <-s.done:
			return nil, fmt.Errorf("operator exited: %w", s.runErr)
		default:
		}
		if probe(env.probeAddr, "/readyz") == http.StatusOK {
			return env, nil
		}
		if time.Now().After(deadline) {
			return nil, errors.New("operator not ready after 2m")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func probe(addr, path string) int {
	resp, err := http.Get("http://" + addr + path)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// newNamespace creates a namespace for one test, with the pods' service account.
func newNamespace(t *testing.T, env *operatorEnv, prefix string) string {
	t.Helper()
	ns := fmt.Sprintf("%s-%d", prefix, time.Now().UnixNano()%1_000_000_000)
	createNamespace(t, env, ns)
	return ns
}

func createNamespace(t *testing.T, env *operatorEnv, ns string) {
	t.Helper()
	ctx := context.Background()
	if _, err := env.kube.CoreV1().Namespaces().Create(ctx,
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := env.kube.CoreV1().ServiceAccounts(ns).Create(ctx,
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: appAccount}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// installRBACAndPolicy installs what the chart installs around the operator: the generated
// ClusterRole bound to the operator's service account, the Role in its namespace (leader
// election, webhook Secret, events; the same rules as charts/baton/templates/rbac.yaml), the
// empty webhook Secret and the sidecar admission policy.
func installRBACAndPolicy(ctx context.Context, c client.Client, scheme *runtime.Scheme) error {
	var objs []client.Object
	for _, path := range []string{"../config/rbac/role.yaml", "../config/policy/sidecar-own-pod.yaml"} {
		decoded, err := testenv.DecodeManifests(scheme, path)
		if err != nil {
			return err
		}
		for _, o := range decoded {
			objs = append(objs, o.(client.Object))
		}
	}
	account := rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: operatorNamespace, Name: operatorAccount}
	objs = append(objs,
		&rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "baton-operator"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "baton-operator"},
			Subjects:   []rbacv1.Subject{account},
		},
		&rbacv1.Role{
			ObjectMeta: metav1.ObjectMeta{Namespace: operatorNamespace, Name: "baton-operator"},
			Rules: []rbacv1.PolicyRule{
				{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
				{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "list", "watch", "update", "patch"}},
				{APIGroups: []string{"", "events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
			},
		},
		&rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: operatorNamespace, Name: "baton-operator"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "baton-operator"},
			Subjects:   []rbacv1.Subject{account},
		},
		// The chart ships the webhook Secret empty; the operator fills it.
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: operatorNamespace, Name: "baton-webhook-tls"}, Type: corev1.SecretTypeTLS,
			Data: map[string][]byte{corev1.TLSCertKey: nil, corev1.TLSPrivateKeyKey: nil}})
	for _, o := range objs {
		if err := c.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("installing %T %s: %w", o, o.GetName(), err)
		}
	}
	return nil
}
