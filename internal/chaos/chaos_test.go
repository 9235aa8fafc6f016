package chaos_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"

	"github.com/baton-dev/baton/internal/chaos"
	"github.com/baton-dev/baton/internal/localcassandra"
	"github.com/baton-dev/baton/internal/testenv"
	"github.com/baton-dev/baton/lock/cassandrastore"
)

var (
	// The defaults are make test's slice: one short run of each fault class (about a minute with
	// the nodes' start); make chaos runs more, longer, and the fault-free workload too.
	runsFlag     = flag.Int("chaos.runs", 1, "runs per fault class")
	durationFlag = flag.Duration("chaos.duration", 8*time.Second, "how long the nemesis works in each run")
	seedFlag     = flag.Uint64("chaos.seed", 1, "seed of the first run; run i uses seed+i (a failing run prints its seed)")
	classesFlag  = flag.String("chaos.classes", chaos.ClassKill+","+chaos.ClassPause, "comma-separated fault classes: "+strings.Join(chaos.Classes, ", "))

	// This test binary's own three nodes (RF 3, QUORUM/SERIAL), apart from every other package's.
	trio = testenv.NewCassandra(func() localcassandra.Config {
		c := localcassandra.Trio()
		c.Name, c.NativePort, c.StoragePort = "chaos-trio", 10442, 8450
		return c
	}())
	binary, binDir string
)

const keyspace = "baton_chaos"

func TestMain(m *testing.M) {
	flag.Parse()
	dir, err := os.MkdirTemp("", "chaos") // short: the sidecars' sockets live here
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir, binary = dir, filepath.Join(dir, "sidecar")
	if out, err := exec.Command("go", "build", "-o", binary, "../../cmd/sidecar").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build ./cmd/sidecar: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	trio.Stop()
	os.RemoveAll(dir)
	os.Exit(code)
}

// TestChaos runs the workload (three sidecar processes holding one lock, each with an app writing
// to a fenced resource with its token) under each fault class, and fails on any anomaly the
// checker finds, on a sidecar that exited by itself, or on a run whose nemesis injected nothing.
// make test runs one short run per fault class; make chaos runs more, longer.
func TestChaos(t *testing.T) {
	cl := trio.Cluster(t)
	session := trio.Session(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	err := cassandrastore.EnsureSchema(ctx, session, keyspace, "{'class': 'SimpleStrategy', 'replication_factor': 3}")
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	for _, class := range strings.Split(*classesFlag, ",") {
		for i := range *runsFlag {
			seed := *seedFlag + uint64(i)
			t.Run(fmt.Sprintf("%s/seed-%d", class, seed), func(t *testing.T) {
				cfg := chaos.Config{
					Binary: binary, Hosts: cl.Hosts(), Keyspace: keyspace, Dir: binDir,
					Lock: fmt.Sprintf("%s-%d-%d", class, seed, time.Now().UnixNano()), Processes: 3, Lease: 3 * time.Second,
					Class: class, Seed: seed, Duration: *durationFlag, Log: testr.New(t),
				}
				ctx, cancel := context.WithTimeout(context.Background(), *durationFlag+5*time.Minute)
				defer cancel()
				res, err := chaos.Run(ctx, cfg)
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("class %s seed %d: %d holds, %d faults, %d writes accepted, %d stale writes rejected",
					class, seed, len(res.History.Holds), res.Faults, res.Accepted, res.Rejected)
				for _, a := range res.Anomalies {
					t.Errorf("anomaly (replay with -chaos.classes=%s -chaos.seed=%d -chaos.runs=1): %s", class, seed, a)
				}
				for _, c := range res.Crashes {
					t.Errorf("a sidecar exited by itself: %s", c)
				}
				if class != chaos.ClassNone && res.Faults == 0 {
					t.Errorf("the nemesis injected no %s fault", class)
				}
				if len(res.History.Holds) == 0 || res.Accepted == 0 {
					t.Errorf("nothing was held or written: %d holds, %d writes", len(res.History.Holds), res.Accepted)
				}
				if t.Failed() {
					for _, h := range res.History.Holds {
						t.Logf("hold %s token %d from %s to %s", h.Process, h.Token, h.Start.Format("15:04:05.000"), h.End.Format("15:04:05.000"))
					}
					for _, f := range res.History.Faults {
						t.Logf("fault %s from %s to %s", f.Name, f.Start.Format("15:04:05.000"), f.End.Format("15:04:05.000"))
					}
				}
			})
		}
	}
}
