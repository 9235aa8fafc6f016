package operator_test

// These tests run the operator in-process against a real kube-apiserver and etcd (envtest, built
// from Go modules by localkube) and a real Cassandra node, the way the chart runs it (its own
// service account, the generated RBAC, the sidecar admission policy), with real sidecar processes
// run by internal/testing/nodeagent for the pods the operator's webhook injected (internal/testing/devcluster).

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/baton-dev/baton/internal/testing/devcluster"
	"github.com/baton-dev/baton/internal/testing/nodeagent"
	"github.com/baton-dev/baton/internal/testing/testenv"
	"github.com/baton-dev/baton/internal/testing/testpki"
)

const (
	keyspace = "baton_operator"
	// globalNamespace is the one namespace the test operator allows scope Global in.
	globalNamespace = "shared-locks"
)

var (
	kube        = testenv.NewKubeWithCRDs(filepath.Join("..", "..", "config", "crd", "bases"))
	cassandra   = testenv.NewCassandra(testenv.CassandraConfig("operator-single"))
	operatorLog = &testenv.SyncBuffer{}
	sidecarLog  = &testenv.SyncBuffer{}
	shared      struct {
		once    sync.Once
		cluster *devcluster.Cluster
		binDir  string // the sidecar binary's directory
		// metricsCA signs the certificate the operator serves its metrics with (for localhost).
		metricsCA []byte
		err       error
	}
)

func TestMain(m *testing.M) {
	// controller-runtime's package-level logger (used by the certificate rotator), as main sets it.
	ctrl.SetLogger(funcr.NewJSON(func(s string) { fmt.Fprintln(operatorLog, s) }, funcr.Options{LogTimestamp: true}))
	code := m.Run()
	if shared.cluster != nil {
		shared.cluster.Stop()
	}
	if shared.binDir != "" {
		os.RemoveAll(shared.binDir)
	}
	cassandra.Stop()
	kube.Stop()
	kubeB.Stop()
	if code != 0 {
		fmt.Fprintf(os.Stderr, "operator log:\n%s\nsidecar logs:\n%s\n", operatorLog.String(), sidecarLog.String())
	}
	os.Exit(code)
}

// up starts the operator on first use and returns it.
func up(t *testing.T) *devcluster.Cluster {
	t.Helper()
	cfg := kube.Config(t)
	hosts := cassandra.Cluster(t).Hosts()
	shared.once.Do(func() {
		// The sidecar build (minutes with an empty Go build cache) has its own bound; the
		// operator's start deadline begins once the binary exists.
		if shared.binDir, shared.err = os.MkdirTemp("", "baton-operator-test"); shared.err != nil {
			return
		}
		sidecar := filepath.Join(shared.binDir, "sidecar")
		bctx, bcancel := context.WithTimeout(context.Background(), 15*time.Minute)
		defer bcancel()
		if shared.err = devcluster.BuildSidecar(bctx, filepath.Join("..", ".."), sidecar); shared.err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		opts := clusterOptions(cfg, hosts, sidecar, "")
		// The metrics endpoint serves a certificate it is given, as with the chart's
		// metrics.certSecret (TestMetricsNeedAuthentication verifies it).
		ca := testpki.NewCA(t)
		pair := ca.Issue(t, "localhost")
		certDir := filepath.Join(shared.binDir, "metrics-certs")
		testpki.WriteFile(t, certDir, "tls.crt", pair.Cert)
		testpki.WriteFile(t, certDir, "tls.key", pair.Key)
		shared.metricsCA = ca.PEM
		opts.OperatorArgs = append(opts.OperatorArgs, "--metrics-cert-dir="+certDir)
		shared.cluster, shared.err = devcluster.Start(ctx, opts)
	})
	if shared.err != nil {
		t.Fatalf("starting the operator: %v\noperator log:\n%s", shared.err, operatorLog.String())
	}
	return shared.cluster
}

// allowedTestHosts are the contact points besides the test nodes that the test clusters' operators
// allow: 127.0.0.1:1 and the tar pits.
func allowedTestHosts() []string {
	hosts := []string{"127.0.0.1:1"}
	for i := range tarPits {
		hosts = append(hosts, tarPitHost(i)) // port 9042
	}
	return hosts
}

// clusterOptions are the settings of a test cluster's operator and node agent on the control plane
// cfg; prefix marks its log lines (the second cluster's, see TestGlobalLockAcrossTwoClusters).
func clusterOptions(cfg *rest.Config, hosts []string, sidecar, prefix string) devcluster.Options {
	return devcluster.Options{
		Server: cfg, RepoRoot: filepath.Join("..", ".."), CassandraHosts: hosts, Keyspace: keyspace, SidecarBinary: sidecar,
		// 127.0.0.1:1 (nothing listens there) is allowed for TestStoreUnreachableCondition, and the
		// tar pits for TestSlowTenantDoesNotStallRevocation.
		OperatorArgs: []string{"--status-interval=1s", "--global-namespaces=" + globalNamespace,
			"--cassandra-allowed-hosts=" + strings.Join(append(slices.Clone(hosts), allowedTestHosts()...), ",")},
		Log:           funcr.NewJSON(func(s string) { fmt.Fprintln(operatorLog, prefix+s) }, funcr.Options{LogTimestamp: true, Verbosity: 1}),
		SidecarOutput: nodeagent.PrefixLines(sidecarLog, prefix),
	}
}

// newNamespace creates a namespace for one test, with the pods' service account.
func newNamespace(t *testing.T, c *devcluster.Cluster, prefix string) string {
	t.Helper()
	ns := fmt.Sprintf("%s-%d", prefix, time.Now().UnixNano()%1_000_000_000)
	if err := c.CreateNamespace(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns
}
