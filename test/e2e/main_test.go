// Package e2e runs baton the way users run it, on a real node: its images imported into
// containerd, the chart installed with helm, the operator and the webhook as pods behind a
// Service, injected pods started by the kubelet with runc, Service traffic through kube-proxy,
// and the lock in a real Cassandra that the pods reach over the pod network.
package e2e

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batonv1 "github.com/baton-dev/baton/api/v1"
	"github.com/baton-dev/baton/internal/testing/batonnode"
	"github.com/baton-dev/baton/internal/testing/localcassandra"
	"github.com/baton-dev/baton/internal/testing/localnode"
	"github.com/baton-dev/baton/internal/testing/testenv"
	"github.com/baton-dev/baton/sidecarclient"
)

var (
	node = testenv.NewNode()
	// cassandra listens on the node's address on the pod bridge, where pods reach it. It starts
	// after the node, which creates that address.
	cassandra = testenv.NewCassandra(func() localcassandra.Config {
		c := testenv.CassandraConfig("e2e-single")
		c.IPs = []string{localnode.HostIP}
		return c
	}())
)

func TestMain(m *testing.M) {
	ctrl.SetLogger(logr.Discard()) // the clients' package-level logger; the tests log what matters
	restore, err := setPanicStandIn()
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: set kernel.panic to a stand-in before the node: %v\n", err)
		os.Exit(1)
	}
	code := m.Run()
	kubeB.Stop()
	authCassandra.stop()
	cassandra.Stop()
	if left := checkNodeLeftNothing(); len(left) > 0 {
		fmt.Printf("--- FAIL: TestMain: after Stop, the node left %d things on the machine:\n%s\n", len(left), strings.Join(left, "\n"))
		code = 1
	}
	restore()
	os.Exit(code)
}

// runIncludes reports whether the run's -test.run pattern may select the top-level test name (a
// guess that errs towards yes: only the pattern's first level is matched).
func runIncludes(name string) bool {
	f := flag.Lookup("test.run")
	if f == nil || f.Value.String() == "" {
		return true
	}
	top, _, _ := strings.Cut(f.Value.String(), "/")
	re, err := regexp.Compile(top)
	return err != nil || re.MatchString(name)
}

// cluster is the node with baton installed.
type cluster struct {
	node    *localnode.Node
	kube    kubernetes.Interface
	client  client.Client
	kubectl string
}

var (
	installOnce sync.Once
	installErr  error
)

// batonCluster returns the node with Cassandra running and baton installed as users install a
// release (once per test binary): make release's output for releaseVersion (release_test.go), its
// image archive imported into the node's containerd and its packaged chart installed by helm
// with the chart's own image; the operator as one replica, its default lock store the e2e
// Cassandra, every sidecar serving its metrics on its pod's IP (sidecarMetricsPort).
func batonCluster(t *testing.T) cluster {
	t.Helper()
	n := node.Get(t)
	authCassandra.prestart() // on the node's address, beside the default Cassandra
	if runIncludes("TestGlobalLockAcrossTheNodeAndAnotherCluster") {
		kubeB.Prestart()
	}
	hosts := cassandra.Cluster(t).Hosts()
	helm := testenv.Helm(t)
	c := clients(t, n)
	installOnce.Do(func() {
		rel, err := importRelease(t, n, helm)
		if err != nil {
			installErr = err
			return
		}
		start := time.Now()
		// A lock may name the auth+TLS Cassandra (TestAuthAndTLSCassandra) and a port where nothing
		// listens (TestUnreachableStoreOnTheNode) besides the default Cassandra.
		out, err := batonnode.Install(context.Background(), batonnode.Chart{Helm: helm, Dir: rel.Chart, ChartImage: true, Node: n,
			Hosts: hosts, AllowedHosts: append(slices.Clone(hosts), authCassandra.host(), unreachableStore),
			GlobalNamespaces: append(slices.Clone(cronNamespaces), clustersNamespace), MetricsPort: sidecarMetricsPort})
		if err != nil {
			installErr = fmt.Errorf("%w\n%s\noperator log: %s", err, out, operatorLogs(n, c.kubectl))
			return
		}
		t.Logf("helm install of %s: operator Ready after %s", filepath.Base(rel.Chart), time.Since(start).Round(100*time.Millisecond))
	})
	if installErr != nil {
		t.Fatal(installErr)
	}
	return c
}

func clients(t *testing.T, n *localnode.Node) cluster {
	t.Helper()
	kube, err := kubernetes.NewForConfig(n.Config)
	if err != nil {
		t.Fatal(err)
	}
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, batonv1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	c, err := client.New(n.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return cluster{node: n, kube: kube, client: c, kubectl: testenv.Kubectl(t)}
}

// operatorLogs returns the operator's log, for a failure message.
func operatorLogs(n *localnode.Node, kubectl string) string {
	out, _ := exec.Command(kubectl, "--kubeconfig", n.Kubeconfig, "logs", "-n", "baton-system",
		"deploy/baton-operator", "--tail", "40").CombinedOutput()
	return string(out)
}

// sidecarClient returns a client for a sidecar's socket on the host. The kubelet's path of an
// emptyDir is longer than a unix socket address may be (108 bytes), so the client dials it
// through a short symbolic link to its directory.
func sidecarClient(t *testing.T, socket string) *sidecarclient.Client {
	t.Helper()
	dir, err := os.MkdirTemp("", "sock")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	link := filepath.Join(dir, "s")
	if err := os.Symlink(filepath.Dir(socket), link); err != nil {
		t.Fatal(err)
	}
	return sidecarclient.New(filepath.Join(link, filepath.Base(socket)))
}
