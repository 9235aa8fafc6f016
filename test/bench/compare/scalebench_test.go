package compare_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/baton-dev/baton/internal/ctxtime"
	"github.com/baton-dev/baton/internal/testing/testenv"
	"github.com/baton-dev/baton/lock"
	"github.com/baton-dev/baton/lock/cassandrastore"
	"github.com/baton-dev/baton/lock/hintudp"
	"github.com/baton-dev/baton/test/bench/compare"
)

var (
	scaleRun        = flag.Bool("scale.run", false, "run the scale measurement (make bench-scale): a three-node Cassandra and the API server, baton and client-go's Lease election side by side")
	scaleLocks      = flag.String("scale.locks", "10,100,1000", "comma-separated numbers of locks")
	scaleContenders = flag.Int("scale.contenders", 3, "contenders per lock")
	scalePods       = flag.Int("scale.pods", 3, "baton: lock clients standing in for pods, each with its own store session and UDP hint socket, shared by its contenders of every lock")
	scaleSettle     = flag.Duration("scale.settle", 20*time.Second, "how long the queues run before the window opens")
	scaleWindow     = flag.Duration("scale.window", time.Minute, "measured window")
	scaleHandOffs   = flag.Int("scale.handoffs", 20, "locks that measure a hand-off (at most a tenth of the locks)")
	scaleFailovers  = flag.Int("scale.failovers", 20, "locks that measure a crash failover (at most a tenth of the locks)")
	scaleOut        = flag.String("scale.out", "", "write the report (Markdown) here")
	scaleJSON       = flag.String("scale.json", "", "write the raw results (JSON) here")
	scaleFrom       = flag.String("scale.from", "", "render the report (-scale.out) from these raw results of an earlier run (-scale.json) instead of measuring; dated by the file's modification time")
)

// idleWindow is how long TestScale measures each server at rest.
const idleWindow = 20 * time.Second

// scaleCassandra is the benchmark's three-node cluster and scaleKube its API server with baton's
// CRD, both started only by TestScale.
var (
	scaleCassandra = testenv.NewCassandra(testenv.CassandraConfig("scale-trio"))
	scaleKube      = testenv.NewKubeWithCRDs(filepath.Join("..", "..", "..", "config", "crd", "bases"))
)

// TestScale is make bench-scale: for each number of locks, baton (in-process lock clients standing
// in for pods' sidecars, with UDP hints, on a three-node Cassandra) and client-go's leader election
// on Leases (the real API server) run the same locks at the default lease, one system after the
// other. The report gives each role's load, the server's own request count and CPU, hand-offs and
// failovers, and a projection to 10,000 locks.
func TestScale(t *testing.T) {
	if *scaleFrom != "" {
		renderScale(t)
		return
	}
	if !*scaleRun {
		t.Skip("make bench-scale runs the scale measurement (-scale.run)")
	}
	counts, err := parseCounts(*scaleLocks)
	if err != nil {
		t.Fatal(err)
	}
	defer scaleCassandra.Stop()
	defer scaleKube.Stop()
	cl := scaleCassandra.Cluster(t)
	ctx := ctxFor(t, 3*time.Hour)
	log := logr.Discard()
	lease := lock.DefaultLease

	// Pods' lock clients: a session and a UDP hint socket each.
	var (
		stores  []lock.Store
		hinters []lock.Hinter
	)
	for range *scalePods {
		s := scaleCassandra.Session(t)
		stores = append(stores, nil)
		h, err := hintudp.New(ctx, hintudp.Config{Bind: "127.0.0.1:0", AllowLoopback: true, Log: log})
		if err != nil {
			t.Fatal(err)
		}
		hinters = append(hinters, h)
		if len(stores) == 1 {
			if err := cassandrastore.EnsureSchema(ctx, s, keyspace, ""); err != nil {
				t.Fatal(err)
			}
		}
		store, err := cassandrastore.New(ctx, s, cassandrastore.WithKeyspace(keyspace))
		if err != nil {
			t.Fatal(err)
		}
		stores[len(stores)-1] = store
	}
	baton, err := compare.NewBatonHinters(fmt.Sprintf("baton, %d pods' lock clients, UDP hints", *scalePods), stores, lease, hinters, log)
	if err != nil {
		t.Fatal(err)
	}
	nodes, nodeSessions := nodeCounters(t, cl.Hosts())
	cassandraCPU := func() (time.Duration, error) {
		var pids []int
		for i := range cl.Hosts() {
			pids = append(pids, cl.NodePID(i))
		}
		return processCPU(pids...)
	}

	kubeCfg := scaleKube.Config(t)
	kubeClient, err := kubernetes.NewForConfig(kubeCfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kubeClient.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}},
		metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("creating namespace %s for the Leases: %v", namespace, err)
	}
	election, err := compare.NewLeaderElection(kubeCfg, namespace, lease, log)
	if err != nil {
		t.Fatal(err)
	}
	apiServerCPU := func() (time.Duration, error) {
		pid, err := childProcess("kube-apiserver")
		if err != nil {
			return 0, err
		}
		return processCPU(pid)
	}
	apiMetrics := func(ctx context.Context) ([]byte, error) {
		raw, err := kubeClient.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
		if err != nil {
			return nil, fmt.Errorf("reading the API server's metrics: %w", err)
		}
		return raw, nil
	}
	apiRequests := func(ctx context.Context) (int64, error) {
		raw, err := apiMetrics(ctx)
		if err != nil {
			return 0, err
		}
		return sumMetric(raw, "apiserver_request_total")
	}
	operator := newScaleOperator(ctx, t, kubeCfg, cl.Hosts(), apiMetrics)

	// What the servers use at rest, before any lock client runs.
	idle := func(name string, cpu func() (time.Duration, error)) float64 {
		a, err := cpu()
		if err == nil {
			err = ctxtime.Sleep(ctx, idleWindow)
		}
		var b time.Duration
		if err == nil {
			b, err = cpu()
		}
		if err != nil {
			t.Fatalf("%s at rest: %v", name, err)
		}
		cores := (b - a).Seconds() / idleWindow.Seconds()
		t.Logf("%s at rest: %.2f cores", name, cores)
		return cores
	}
	cassandraIdle, apiServerIdle := idle("Cassandra", cassandraCPU), idle("the API server", apiServerCPU)

	var results []compare.ScaleResult
	for _, n := range counts {
		for _, run := range []struct {
			sys      compare.System
			requests func(context.Context) (int64, error)
			cpu      func() (time.Duration, error)
			idle     float64
			operator bool // the operator reconciles a DistributedLock per lock
		}{
			{namespaced{baton, scaleNamespace}, func(ctx context.Context) (int64, error) { return nodes(ctx) }, cassandraCPU, cassandraIdle, true},
			{election, apiRequests, apiServerCPU, apiServerIdle, false},
		} {
			cfg := compare.ScaleConfig{Locks: n, Contenders: *scaleContenders, Lease: lease,
				Settle: *scaleSettle, Window: *scaleWindow,
				HandOffs: min(*scaleHandOffs, n/10), Failovers: min(*scaleFailovers, n/10),
				InFlight: 64, Requests: run.requests, CPU: run.cpu, IdleCores: run.idle}
			start := time.Now()
			id := uniqueID(fmt.Sprintf("s%d", n))
			var op *runningOperator
			if run.operator {
				// The operator runs only beside baton's locks: the Lease anchor's API server
				// counts no request of it. Its DistributedLocks exist and are reconciled before
				// the contenders start, as a deployment's would be.
				op = operator.start(ctx, t)
				ids := make([]string, n)
				for l := range ids {
					ids[l] = compare.ScaleLockID(id, l)
				}
				operator.createLocks(ctx, t, ids)
				cfg.Operator = func(ctx context.Context) (compare.OperatorSample, error) { return operator.sample(ctx, op) }
				cfg.Connections = nodeConnections(nodeSessions)
			}
			t.Logf("%s: %d locks × %d contenders ...", run.sys.Name(), n, cfg.Contenders)
			res, err := compare.Scale(ctx, run.sys, id, cfg)
			if op != nil {
				op.stop()
				operator.deleteLocks(ctx, t)
			}
			if err != nil {
				t.Fatalf("%s, %d locks: %v", run.sys.Name(), n, err)
			}
			t.Logf("%s: %d locks: %s (took %s)", run.sys.Name(), n, summary(res), time.Since(start).Round(time.Second))
			results = append(results, res)
		}
	}
	report := compare.ScaleReport(results, time.Now())
	t.Log("\n" + report)
	if *scaleOut != "" {
		if err := os.WriteFile(*scaleOut, []byte(report), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if *scaleJSON != "" {
		b, err := json.MarshalIndent(results, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(*scaleJSON, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// renderScale writes the report of the results in -scale.from to -scale.out: no measurement.
func renderScale(t *testing.T) {
	b, err := os.ReadFile(*scaleFrom)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(*scaleFrom)
	if err != nil {
		t.Fatal(err)
	}
	var results []compare.ScaleResult
	if err := json.Unmarshal(b, &results); err != nil {
		t.Fatalf("%s: %v", *scaleFrom, err)
	}
	report := compare.ScaleReport(results, fi.ModTime())
	if *scaleOut == "" {
		t.Log("\n" + report)
		return
	}
	if err := os.WriteFile(*scaleOut, []byte(report), 0o644); err != nil {
		t.Fatal(err)
	}
}

func summary(r compare.ScaleResult) string {
	return fmt.Sprintf("per lock %.2f req/s (contenders), %.2f (server); server %.0f req/s, %.2f cores; hand-off p50 %s p99 %s; failover p50 %s p99 %s (%d early)",
		r.Client, r.ServerPerLock, r.Server, r.ServerCores,
		compare.Percentile(r.HandOff, 50), compare.Percentile(r.HandOff, 99),
		compare.Percentile(r.Failover, 50), compare.Percentile(r.Failover, 99), r.EarlyFailovers)
}

func parseCounts(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("-scale.locks: %q is not a positive number of locks", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// nodeCounters returns a function that sums every node's system_views.clients counts: the table
// is each node's own, so each is read through a session that talks to that node alone.
func nodeCounters(t *testing.T, hosts []string) (func(context.Context) (int64, error), []*gocql.Session) {
	t.Helper()
	var sessions []*gocql.Session
	for _, h := range hosts {
		cc := gocql.NewCluster(h)
		host, _, _ := strings.Cut(h, ":")
		cc.Port = portOf(t, h)
		cc.HostFilter = gocql.WhiteListHostFilter(host)
		cc.Timeout = 10 * time.Second
		s, err := cc.CreateSession()
		if err != nil {
			t.Fatalf("session to %s alone: %v", h, err)
		}
		t.Cleanup(s.Close)
		sessions = append(sessions, s)
	}
	return func(ctx context.Context) (int64, error) {
		var sum int64
		for _, s := range sessions {
			n, err := nodeRequests(ctx, s)
			if err != nil {
				return 0, err
			}
			sum += n
		}
		return sum, nil
	}, sessions
}

func portOf(t *testing.T, hostPort string) int {
	t.Helper()
	_, p, ok := strings.Cut(hostPort, ":")
	n, err := strconv.Atoi(p)
	if !ok || err != nil {
		t.Fatalf("host %q has no port", hostPort)
	}
	return n
}

// clockTicks is Linux's USER_HZ, the unit of /proc/<pid>/stat's CPU times: 100 on every
// architecture Linux runs Go on.
const clockTicks = 100

// processCPU sums the user and system CPU time of pids (Linux, /proc/<pid>/stat).
func processCPU(pids ...int) (time.Duration, error) {
	var ticks int64
	for _, pid := range pids {
		if pid == 0 {
			return 0, errors.New("a server process is not running")
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return 0, err
		}
		// The command name (field 2) may hold spaces; the fields after its closing parenthesis are
		// state (3) ... utime (14), stime (15).
		_, rest, ok := bytes.Cut(b, []byte(") "))
		f := strings.Fields(string(rest))
		if !ok || len(f) < 13 {
			return 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
		}
		for _, v := range f[11:13] {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
			}
			ticks += n
		}
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}

// childProcess returns the PID of this process's child whose command is name.
func childProcess(name string) (int, error) {
	self := os.Getpid()
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		return 0, err
	}
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // gone
		}
		head, rest, ok := bytes.Cut(b, []byte(") "))
		_, comm, _ := bytes.Cut(head, []byte(" ("))
		f := strings.Fields(string(rest))
		if !ok || len(f) < 2 || string(comm) != name {
			continue
		}
		if ppid, _ := strconv.Atoi(f[1]); ppid == self {
			return strconv.Atoi(filepath.Base(filepath.Dir(p)))
		}
	}
	return 0, fmt.Errorf("no child process %q of this test binary", name)
}

// errNoMetric is sumMetricIf's error when the exposition has no sample of the counter.
var errNoMetric = errors.New("no such metric")

// sumMetric sums every sample of the Prometheus counter name in a text exposition.
func sumMetric(exposition []byte, name string) (int64, error) {
	return sumMetricIf(exposition, name, func(string) bool { return true })
}

// sumMetricIf sums the samples of the Prometheus metric name in a text exposition whose labels
// (the text between the braces, empty when none) keep says to count. No sample at all is an error
// that wraps errNoMetric.
func sumMetricIf(exposition []byte, name string, keep func(labels string) bool) (int64, error) {
	var sum float64
	found := false
	sc := bufio.NewScanner(bytes.NewReader(exposition))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		value, labels := line[len(name):], ""
		if i := strings.LastIndexByte(value, '}'); i >= 0 {
			value, labels = value[i+1:], value[:i]
		}
		f := strings.Fields(value)
		if len(f) == 0 {
			return 0, fmt.Errorf("metric line %q has no value", line)
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			return 0, fmt.Errorf("metric line %q: %w", line, err)
		}
		found = true
		if keep(labels) {
			sum += v
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	if !found {
		return 0, fmt.Errorf("%s: %w", name, errNoMetric)
	}
	return int64(sum), nil
}
