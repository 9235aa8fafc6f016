//go:build linux

package chaos_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"

	"github.com/baton-dev/baton/internal/testing/testenv"
	"github.com/baton-dev/baton/lock"
	"github.com/baton-dev/baton/lock/cassandrastore"
	"github.com/baton-dev/baton/test/chaos"
)

var (
	// The defaults are make test's slice (see the Makefile); make chaos runs every class, more
	// runs, longer.
	runsFlag      = flag.Int("chaos.runs", 1, "runs per fault class and workload")
	durationFlag  = flag.Duration("chaos.duration", 9*time.Second, "how long the nemesis works in each run")
	seedFlag      = flag.Uint64("chaos.seed", 1, "seed of the first run; run i uses seed+i (a failing run prints its seed)")
	classesFlag   = flag.String("chaos.classes", chaos.ClassMixed, "comma-separated fault classes: "+strings.Join(chaos.Classes, ", "))
	workloadsFlag = flag.String("chaos.workloads", strings.Join(chaos.Workloads, ","), "comma-separated workloads: "+strings.Join(chaos.Workloads, ", "))
	processesFlag = flag.Int("chaos.processes", 3, "sidecar processes per run")
	reportFlag    = flag.Bool("chaos.report", false, "log every run's holds, faults and process logs, not only a failing run's")

	// This test binary's own three nodes (RF 3, QUORUM/SERIAL), apart from every other package's.
	trio                           = testenv.NewCassandra(testenv.CassandraConfig("chaos-trio"))
	binary, runner, writer, binDir string
)

const (
	keyspace = "baton_chaos"
	lease    = 3 * time.Second
	// firstUID is the first of the users the sidecars run as, when the tests run as root, so that
	// the partition class can drop one sidecar's packets by owner.
	firstUID = 61000
)

func TestMain(m *testing.M) {
	flag.Parse()
	dir, err := os.MkdirTemp("", "chaos") // short: the sidecars' sockets live here
	if err == nil && os.Geteuid() == 0 {
		err = os.Chmod(dir, 0o1777) // the sidecars' own users run the binary and make their sockets here
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir, binary, runner, writer = dir, filepath.Join(dir, "sidecar"), filepath.Join(dir, "baton"), filepath.Join(dir, "chaoswriter")
	// One go build for the three: each lands in dir under its package's name.
	if msg, err := exec.Command("go", "build", "-o", dir, "github.com/baton-dev/baton/cmd/sidecar", "github.com/baton-dev/baton/cmd/baton", "github.com/baton-dev/baton/hack/chaoswriter").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build ./cmd/sidecar ./cmd/baton ./hack/chaoswriter: %v\n%s", err, msg)
		os.Exit(1)
	}
	code := m.Run()
	trio.Stop()
	os.RemoveAll(dir)
	os.Exit(code)
}

// TestChaos runs each workload under each fault class (flags -chaos.*) and fails on any anomaly
// the checker finds, on a sidecar that exited by itself (or not cleanly when told to), or on a run
// whose nemesis injected nothing. It ends with a table per class and workload, the one
// docs/reliability.md reports.
func TestChaos(t *testing.T) {
	cl := trio.Cluster(t)
	session := trio.Session(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	err := cassandrastore.EnsureSchema(ctx, session, keyspace, "{'class': 'SimpleStrategy', 'replication_factor': 3}")
	var store *cassandrastore.Store
	if err == nil {
		store, err = cassandrastore.New(ctx, session, cassandrastore.WithKeyspace(keyspace))
	}
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	uid := 0
	if os.Geteuid() == 0 {
		uid = firstUID
	}
	var rows []summary
	for _, class := range strings.Split(*classesFlag, ",") {
		for _, workload := range strings.Split(*workloadsFlag, ",") {
			if !chaos.Applies(class, workload) {
				continue
			}
			row := summary{class: class, workload: workload}
			for i := range *runsFlag {
				seed := *seedFlag + uint64(i)
				t.Run(fmt.Sprintf("%s/%s/seed-%d", class, workload, seed), func(t *testing.T) {
					cfg := chaos.Config{
						Binary: binary, Runner: runner, Writer: writer, Hosts: cl.Hosts(), Keyspace: keyspace, Dir: binDir,
						Lock:      fmt.Sprintf("%s-%s-%d-%d", class, workload, seed, time.Now().UnixNano()),
						Processes: *processesFlag, Lease: lease, Workload: workload,
						Class: class, Seed: seed, Duration: *durationFlag, Log: testr.New(t),
						Nodes: cl, UID: uid, CassandraPort: cl.Config().NativePort,
						Revoke: func(ctx context.Context, lockID string, token int64) error {
							return lock.Revoke(ctx, store, lockID, token)
						},
					}
					logs := map[string]*testenv.SyncBuffer{}
					cfg.Output = func(process string) io.Writer {
						if logs[process] == nil {
							logs[process] = &testenv.SyncBuffer{}
						}
						return logs[process]
					}
					res, problems := runOne(t, cfg)
					row.add(res)
					if len(problems) > 0 || *reportFlag {
						report(t, res, logs)
					}
					// Last, so that they end the output (CI shows its tail).
					for _, p := range problems {
						t.Error(p)
					}
				})
			}
			rows = append(rows, row)
		}
	}
	t.Logf("lease %v, %d processes, %v of faults per run\n%s", lease, *processesFlag, *durationFlag, table(rows))
}

// runOne runs cfg and returns what the run found wrong, each with the flags that replay it.
func runOne(t *testing.T, cfg chaos.Config) (chaos.Result, []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Duration+10*time.Minute)
	defer cancel()
	res, err := chaos.Run(ctx, cfg)
	switch {
	case errors.Is(err, chaos.ErrUnavailable) && !testenv.InCI():
		t.Skipf("%v (run as root, with make install-deps done, to include it)", err)
	case err != nil:
		t.Fatal(err)
	}
	t.Logf("class %s workload %s seed %d: %d holds, %d faults, %d writes accepted, %d stale writes rejected, hand-off p50 %v, failover p50 %v",
		cfg.Class, cfg.Workload, cfg.Seed, len(res.History.Holds), res.Faults, res.Accepted, res.Rejected,
		chaos.Quantile(res.Timings.Handoffs, 0.5), chaos.Quantile(res.Timings.Failovers, 0.5))
	replay := fmt.Sprintf("replay with -chaos.classes=%s -chaos.workloads=%s -chaos.seed=%d -chaos.runs=1 -chaos.duration=%v",
		cfg.Class, cfg.Workload, cfg.Seed, cfg.Duration)
	var problems []string
	for _, a := range res.Anomalies {
		problems = append(problems, fmt.Sprintf("anomaly (%s): %s", replay, a))
	}
	for _, c := range res.Crashes {
		problems = append(problems, fmt.Sprintf("sidecar crash (%s): %s", replay, c))
	}
	if cfg.Class != chaos.ClassNone && res.Faults == 0 {
		problems = append(problems, fmt.Sprintf("the nemesis injected no %s fault (%s)", cfg.Class, replay))
	}
	if len(res.History.Holds) == 0 || res.Accepted == 0 {
		problems = append(problems, fmt.Sprintf("nothing was held or written: %d holds, %d writes (%s)", len(res.History.Holds), res.Accepted, replay))
	}
	return res, problems
}

// report logs a failed run's history and the end of each sidecar's log.
func report(t *testing.T, res chaos.Result, logs map[string]*testenv.SyncBuffer) {
	for _, h := range res.History.Holds {
		t.Logf("hold %s token %d from %s to %s (%s)", h.Process, h.Token, h.Start.Format("15:04:05.000"), h.End.Format("15:04:05.000"), h.EndedBy)
	}
	for _, f := range res.History.Faults {
		t.Logf("fault %s from %s to %s", f.Name, f.Start.Format("15:04:05.000"), f.End.Format("15:04:05.000"))
	}
	for name, b := range logs {
		lines := strings.Split(strings.TrimSpace(b.String()), "\n")
		t.Logf("last lines of %s's log:\n%s", name, strings.Join(lines[max(0, len(lines)-40):], "\n"))
	}
}

// summary is one row of the report: a class and workload over its runs.
type summary struct {
	class, workload      string
	runs, faults, grants int
	accepted, rejected   int64
	anomalies            int
	timings              chaos.Timings
	peakGoroutines       int
	peakRSS              int64
}

func (s *summary) add(r chaos.Result) {
	s.runs++
	s.faults += r.Faults
	s.grants += len(r.History.Holds)
	s.accepted += r.Accepted
	s.rejected += r.Rejected
	s.anomalies += len(r.Anomalies) + len(r.Crashes)
	s.timings.Add(r.Timings)
	s.peakGoroutines = max(s.peakGoroutines, r.PeakGoroutines)
	s.peakRSS = max(s.peakRSS, r.PeakRSS)
}

// table renders rows as docs/reliability.md's table; times are multiples of the lease.
func table(rows []summary) string {
	var b strings.Builder
	b.WriteString("| class | workload | runs | faults | grants | writes accepted | stale writes rejected | anomalies | hand-off p50 / p99 (n) | failover p50 / p99 (n) | peak goroutines | peak RSS |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	times := func(ds []time.Duration) string {
		if len(ds) == 0 {
			return "–"
		}
		return fmt.Sprintf("%.2f / %.2f (%d)", float64(chaos.Quantile(ds, 0.5))/float64(lease), float64(chaos.Quantile(ds, 0.99))/float64(lease), len(ds))
	}
	for _, r := range rows {
		goroutines, rss := "–", "–" // baton run has no metrics
		if r.peakGoroutines > 0 {
			goroutines, rss = fmt.Sprint(r.peakGoroutines), fmt.Sprintf("%.0f MiB", float64(r.peakRSS)/(1<<20))
		}
		fmt.Fprintf(&b, "| `%s` | %s | %d | %d | %d | %d | %d | %d | %s | %s | %s | %s |\n",
			r.class, r.workload, r.runs, r.faults, r.grants, r.accepted, r.rejected, r.anomalies,
			times(r.timings.Handoffs), times(r.timings.Failovers), goroutines, rss)
	}
	return b.String()
}
