package compare_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batonv1 "github.com/baton-dev/baton/api/v1"
	"github.com/baton-dev/baton/internal/sidecarcontract"
	"github.com/baton-dev/baton/internal/testing/localkube"
	"github.com/baton-dev/baton/internal/testing/testenv"
	"github.com/baton-dev/baton/internal/testing/testpki"
	"github.com/baton-dev/baton/test/bench/compare"
)

// scaleNamespace holds the scale run's DistributedLocks; baton's contenders use the store keys the
// sidecars of pods in it would (sidecarcontract.StoreLockID), so that the operator reads the
// locks they hold and queue for.
const scaleNamespace = "baton-scale"

// operatorNamespace is the operator's own (its leader-election Lease).
const operatorNamespace = "baton-system"

// namespaced is a System whose lock IDs are the store keys of Namespace-scoped lock IDs in ns.
type namespaced struct {
	compare.System
	ns string
}

// Contender implements compare.System.
func (s namespaced) Contender(ctx context.Context, lockID string, i int) (compare.Contender, error) {
	return s.System.Contender(ctx, sidecarcontract.StoreLockID(batonv1.ScopeNamespace, s.ns, lockID), i)
}

// scaleOperator is cmd/operator built once and run as a process of its own per baton run, at its
// defaults (leader election on, the 5 min safety refresh, 8 concurrent reconciles), as admin of
// the scale run's API server, with metrics over plain HTTP on loopback and a webhook certificate
// made by the test (--webhook-certs=external): nothing is injected in this run.
type scaleOperator struct {
	binary, dir string
	kubeconfig  string
	hosts       []string
	api         client.Client
	apiMetrics  func(ctx context.Context) ([]byte, error)
}

// newScaleOperator builds cmd/operator into a directory removed when t ends and prepares what
// each run needs: a kubeconfig, the webhook certificate, the namespaces.
func newScaleOperator(ctx context.Context, t *testing.T, cfg *rest.Config, hosts []string, apiMetrics func(context.Context) ([]byte, error)) *scaleOperator {
	t.Helper()
	dir := t.TempDir()
	o := &scaleOperator{binary: filepath.Join(dir, "operator"), dir: dir, kubeconfig: filepath.Join(dir, "kubeconfig"),
		hosts: hosts, apiMetrics: apiMetrics}
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", o.binary, "../../../cmd/operator").CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/operator: %v\n%s", err, out)
	}
	if err := localkube.WriteKubeconfig(cfg, o.kubeconfig); err != nil {
		t.Fatal(err)
	}
	pair := testpki.NewCA(t).Issue(t, "localhost")
	testpki.WriteFile(t, filepath.Join(dir, "certs"), "tls.crt", pair.Cert)
	testpki.WriteFile(t, filepath.Join(dir, "certs"), "tls.key", pair.Key)
	scheme := runtime.NewScheme()
	if err := errors.Join(clientgoscheme.AddToScheme(scheme), batonv1.AddToScheme(scheme)); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	o.api = c
	for _, ns := range []string{scaleNamespace, operatorNamespace} {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("creating namespace %s: %v", ns, err)
		}
	}
	return o
}

// runningOperator is one operator process.
type runningOperator struct {
	cmd     *exec.Cmd
	metrics string // http://.../metrics
	log     string // its log file
	done    chan error
}

// start starts the operator process and returns once it answers /readyz.
func (o *scaleOperator) start(ctx context.Context, t *testing.T) *runningOperator {
	t.Helper()
	metricsPort, probePort, webhookPort := testenv.FreePort(t), testenv.FreePort(t), testenv.FreePort(t)
	logPath := filepath.Join(o.dir, fmt.Sprintf("operator-%d.log", time.Now().UnixNano()))
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	cmd := exec.Command(o.binary,
		"--kubeconfig="+o.kubeconfig,
		"--namespace="+operatorNamespace,
		"--sidecar-image=baton.local/baton:dev",
		"--native-sidecars=true",
		"--cassandra-hosts="+strings.Join(o.hosts, ","),
		"--cassandra-keyspace="+keyspace,
		"--cassandra-allow-anonymous",
		"--cassandra-ensure-schema=false", // the test made it
		"--webhook-certs=external",
		"--webhook-cert-dir="+filepath.Join(o.dir, "certs"),
		"--webhook-port="+strconv.Itoa(webhookPort),
		"--metrics-secure=false",
		"--metrics-bind-address=127.0.0.1:"+strconv.Itoa(metricsPort),
		"--health-probe-bind-address=127.0.0.1:"+strconv.Itoa(probePort))
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting the operator: %v", err)
	}
	r := &runningOperator{cmd: cmd, metrics: fmt.Sprintf("http://127.0.0.1:%d/metrics", metricsPort), log: logPath, done: make(chan error, 1)}
	go func() { r.done <- cmd.Wait() }()
	ready := fmt.Sprintf("http://127.0.0.1:%d/readyz", probePort)
	deadline := time.Now().Add(time.Minute)
	for {
		select {
		case err := <-r.done:
			t.Fatalf("the operator exited before it was ready: %v\n%s", err, tail(logPath))
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
		if resp, err := http.Get(ready); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return r
			}
		}
		if time.Now().After(deadline) {
			r.stop()
			t.Fatalf("the operator was not ready within a minute\n%s", tail(logPath))
		}
	}
}

// stop ends the process (SIGTERM, then SIGKILL after 30 s) and waits for it.
func (r *runningOperator) stop() {
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-r.done:
	case <-time.After(30 * time.Second):
		_ = r.cmd.Process.Kill()
		<-r.done
	}
}

// sample reads the operator's counters: CPU time and resident memory from /proc, its Go heap,
// API write requests and store reads from its metrics, and the API server's count of
// DistributedLock status writes.
func (o *scaleOperator) sample(ctx context.Context, r *runningOperator) (compare.OperatorSample, error) {
	var s compare.OperatorSample
	pid := r.cmd.Process.Pid
	cpu, err := processCPU(pid)
	if err != nil {
		return s, err
	}
	s.CPU = cpu
	if s.RSS, err = processRSS(pid); err != nil {
		return s, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.metrics, nil)
	if err != nil {
		return s, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return s, fmt.Errorf("the operator's metrics: %w", err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return s, err
	}
	if s.Heap, err = sumMetric(body, "go_memstats_heap_inuse_bytes"); err != nil {
		return s, err
	}
	if s.APIWrites, err = sumMetricIf(body, "rest_client_requests_total", func(labels string) bool {
		for _, m := range []string{"POST", "PUT", "PATCH", "DELETE"} {
			if strings.Contains(labels, `method="`+m+`"`) {
				return true
			}
		}
		return false
	}); err != nil {
		return s, err
	}
	// The counter has no series before the first read.
	if s.StoreReads, err = sumMetricIf(body, "baton_distributedlock_store_requests_total", func(labels string) bool {
		return strings.Contains(labels, `kind="read"`)
	}); err != nil && !errors.Is(err, errNoMetric) {
		return s, err
	}
	api, err := o.apiMetrics(ctx)
	if err != nil {
		return s, err
	}
	if s.StatusWrites, err = sumMetricIf(api, "apiserver_request_total", func(labels string) bool {
		return strings.Contains(labels, `resource="distributedlocks"`) && strings.Contains(labels, `subresource="status"`) &&
			!strings.Contains(labels, `verb="GET"`) && !strings.Contains(labels, `verb="LIST"`) && !strings.Contains(labels, `verb="WATCH"`)
	}); err != nil && !errors.Is(err, errNoMetric) {
		return s, err
	}
	return s, nil
}

// createLocks creates a DistributedLock (one lock ID, its name) per lock ID and waits until the
// operator has reconciled every one (status.observedGeneration is its generation).
func (o *scaleOperator) createLocks(ctx context.Context, t *testing.T, ids []string) {
	t.Helper()
	var g errGroup
	sem := make(chan struct{}, 16)
	for _, id := range ids {
		g.Go(func() error {
			sem <- struct{}{}
			defer func() { <-sem }()
			dl := &batonv1.DistributedLock{ObjectMeta: metav1.ObjectMeta{Namespace: scaleNamespace, Name: id},
				Spec: batonv1.DistributedLockSpec{LockIDs: []string{id}}}
			if err := o.api.Create(ctx, dl); err != nil {
				return fmt.Errorf("creating DistributedLock %s: %w", id, err)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	var pending int
	took := testenv.WaitFor(t, fmt.Sprintf("the operator to reconcile %d DistributedLocks", len(ids)), 5*time.Minute, func() bool {
		var l batonv1.DistributedLockList
		if err := o.api.List(ctx, &l, client.InNamespace(scaleNamespace)); err != nil {
			return false
		}
		pending = 0
		for _, dl := range l.Items {
			if dl.Status.ObservedGeneration != dl.Generation {
				pending++
			}
		}
		return len(l.Items) == len(ids) && pending == 0
	})
	t.Logf("the operator reconciled %d DistributedLocks within %s of their creation", len(ids), took.Round(time.Millisecond))
}

// deleteLocks deletes every DistributedLock of the scale namespace.
func (o *scaleOperator) deleteLocks(ctx context.Context, t *testing.T) {
	t.Helper()
	if err := o.api.DeleteAllOf(ctx, &batonv1.DistributedLock{}, client.InNamespace(scaleNamespace)); err != nil {
		t.Fatalf("deleting the DistributedLocks: %v", err)
	}
}

// errGroup runs functions and returns the first error.
type errGroup struct {
	errs chan error
	n    int
}

func (g *errGroup) Go(f func() error) {
	if g.errs == nil {
		g.errs = make(chan error, 1024)
	}
	g.n++
	go func() { g.errs <- f() }()
}

func (g *errGroup) Wait() error {
	var errs []error
	for range g.n {
		errs = append(errs, <-g.errs)
	}
	return errors.Join(errs...)
}

// processRSS returns the resident memory of pid in bytes (Linux, /proc/<pid>/status VmRSS).
func processRSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 3 && f[0] == "VmRSS:" && f[2] == "kB" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("/proc/%d/status: %w", pid, err)
			}
			return kb * 1024, nil
		}
	}
	return 0, fmt.Errorf("/proc/%d/status has no VmRSS", pid)
}

// nodeConnections returns a function that counts the client connections of each node, one
// session per node (see nodeCounters): the rows of the node's system_views.clients, the
// measuring sessions' own included.
func nodeConnections(sessions []*gocql.Session) func(context.Context) ([]int, error) {
	return func(ctx context.Context) ([]int, error) {
		out := make([]int, len(sessions))
		for i, s := range sessions {
			iter := s.Query(`SELECT port FROM system_views.clients`).Consistency(gocql.One).IterContext(ctx)
			var port int
			for iter.Scan(&port) {
				out[i]++
			}
			if err := iter.Close(); err != nil {
				return nil, fmt.Errorf("reading system_views.clients: %w", err)
			}
		}
		return out, nil
	}
}

// tail returns the last lines of the file at path, for a failure message.
func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(lines[max(0, len(lines)-40):], "\n")
}
