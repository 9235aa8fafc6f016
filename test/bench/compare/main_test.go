package compare_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/baton-dev/baton/internal/testing/localhint"
	"github.com/baton-dev/baton/internal/testing/testenv"
	"github.com/baton-dev/baton/lock"
	"github.com/baton-dev/baton/lock/cassandrastore"
	"github.com/baton-dev/baton/test/bench/compare"
	"github.com/baton-dev/baton/test/bench/compare/lwtlock"
	"github.com/baton-dev/baton/test/bench/compare/oldalgo"
)

// This test binary's own Cassandra node (ports 10042/8050) and kube-apiserver, so it runs beside
// every other package's tests.
var (
	cassandra = testenv.NewCassandra(testenv.CassandraConfig("compare-single"))
	kube      = testenv.NewKube()
)

// sidecarBinary is cmd/sidecar, built once into a directory TestMain removes.
var sidecarBinary struct {
	once sync.Once
	dir  string
	path string
	err  error
}

// buildSidecar builds cmd/sidecar once per test binary.
func buildSidecar(t *testing.T) (binary, dir string) {
	t.Helper()
	b := &sidecarBinary
	b.once.Do(func() {
		// Short: the sidecars' unix sockets live here too, and a socket path has at most 107 bytes.
		if b.dir, b.err = os.MkdirTemp("", "cmp"); b.err != nil {
			return
		}
		b.path = filepath.Join(b.dir, "sidecar")
		if out, err := exec.Command("go", "build", "-o", b.path, "../../../cmd/sidecar").CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build ./cmd/sidecar: %v\n%s", err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path, b.dir
}

func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	cassandra.Stop()
	kube.Stop()
	if sidecarBinary.dir != "" {
		os.RemoveAll(sidecarBinary.dir)
	}
	os.Exit(code)
}

const (
	keyspace  = "baton_compare"
	namespace = "baton-compare"
)

// env is what the systems run on: Cassandra sessions and stores, and the API server.
type env struct {
	sessions []*gocql.Session
	stores   []lock.Store
	kube     *rest.Config
}

var schema struct {
	mu   sync.Mutex
	done bool
}

// setup connects n sessions (closed when t ends), creates the schemas and the namespace once.
func setup(t *testing.T, n int) *env {
	t.Helper()
	// Cassandra and the control plane first, each waited for with its own bound (testenv); the
	// deadline of this setup's own work starts once both are up.
	e := &env{}
	for range n {
		e.sessions = append(e.sessions, cassandra.Session(t))
	}
	kubeCfg := kube.Config(t)
	e.kube = kubeCfg
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	schema.mu.Lock()
	defer schema.mu.Unlock()
	if !schema.done {
		s := e.sessions[0]
		if err := cassandrastore.EnsureSchema(ctx, s, keyspace, ""); err != nil {
			t.Fatal(err)
		}
		if err := oldalgo.EnsureSchema(ctx, s, keyspace); err != nil {
			t.Fatal(err)
		}
		if err := lwtlock.EnsureSchema(ctx, s, keyspace); err != nil {
			t.Fatal(err)
		}
		client, err := kubernetes.NewForConfig(kubeCfg)
		if err != nil {
			t.Fatal(err)
		}
		_, err = client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("creating namespace %s: %v", namespace, err)
		}
		schema.done = true
	}
	for _, s := range e.sessions {
		store, err := cassandrastore.New(ctx, s, cassandrastore.WithKeyspace(keyspace))
		if err != nil {
			t.Fatal(err)
		}
		e.stores = append(e.stores, store)
	}
	return e
}

// Names of the systems in the tables, in table order.
const (
	nameBaton     = "baton queue lock (defaults, polling)"
	nameBatonHint = "baton queue lock + in-process hand-off hint"
	nameSidecars  = "baton sidecar processes + UDP hints"
)

// systems returns every system under comparison with lease; log goes to the lock clients.
func systems(t *testing.T, e *env, lease time.Duration, log logr.Logger) []compare.System {
	t.Helper()
	old, err := compare.NewOldAlgo(e.sessions, keyspace, lease, log)
	if err != nil {
		t.Fatal(err)
	}
	// The LWT lock polls as often as baton's queue head does by default, so that the two differ
	// only by the queue.
	lwt, err := compare.NewLWT(e.sessions, keyspace, lease, lock.DefaultPollInterval, log)
	if err != nil {
		t.Fatal(err)
	}
	baton, err := compare.NewBaton(nameBaton, e.stores, lease, nil, log)
	if err != nil {
		t.Fatal(err)
	}
	hinted, err := compare.NewBaton(nameBatonHint, e.stores, lease, localhint.New(), log)
	if err != nil {
		t.Fatal(err)
	}
	binary, dir := buildSidecar(t)
	port := testenv.FreePort(t)
	sidecars, err := compare.NewSidecars(compare.SidecarsConfig{Name: nameSidecars, Binary: binary,
		Hosts: cassandra.Cluster(t).Hosts(), Keyspace: keyspace, Lease: lease, HintPort: port, Dir: dir, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sidecars.Close)
	le, err := compare.NewLeaderElection(e.kube, namespace, lease, log)
	if err != nil {
		t.Fatal(err)
	}
	return []compare.System{old, lwt, baton, hinted, sidecars, le}
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func uniqueID(prefix string) string {
	return fmt.Sprintf("%s-%d", prefix, time.Now().UnixNano())
}
