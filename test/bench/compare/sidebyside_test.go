package compare_test

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"

	"github.com/baton-dev/baton/internal/testing/localcassandra"
	"github.com/baton-dev/baton/internal/testing/localkube"
	"github.com/baton-dev/baton/lock/cassandrastore"
	"github.com/baton-dev/baton/test/bench/compare"
)

var (
	runFlag     = flag.Bool("compare.run", false, "run the side-by-side comparison (docs/design.md, Targets) (about 9 minutes on two cores; make bench)")
	quickFlag   = flag.Bool("compare.quick", false, "with -compare.run: a reduced run of about 3 minutes (p99s on few samples)")
	leaseFlag   = flag.Duration("compare.lease", 3*time.Second, "lease of every system (whole seconds)")
	outFlag     = flag.String("compare.out", "", "also write the Markdown tables to this file")
	jsonFlag    = flag.String("compare.json", "", "also write the raw results as JSON to this file (for package plots)")
	systemsFlag = flag.String("compare.systems", "", "comma-separated substrings of system names to measure (default: all)")
	metricsFlag = flag.String("compare.metrics", "", "comma-separated subset of "+strings.Join(compare.AllMetrics, ",")+" (default: all)")
)

// TestSideBySide is the measurement of docs/benchmarks.md, "Side by side". It runs only with
// -compare.run.
func TestSideBySide(t *testing.T) {
	if !*runFlag {
		t.Skip("the side-by-side comparison runs only with -compare.run (make bench)")
	}
	cfg := compare.FullConfig(*leaseFlag)
	if *quickFlag {
		cfg = compare.QuickConfig(*leaseFlag)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	e := setup(t, 4)
	var selected []compare.System
	// The lock clients log nothing: client-go's elector logs every cancelled request as an error,
	// and the tables count the errors that matter.
	for _, sys := range systems(t, e, cfg.Lease, logr.Discard()) {
		if *systemsFlag == "" || matchesAny(sys.Name(), *systemsFlag) {
			selected = append(selected, sys)
		}
	}
	var metrics []string
	if *metricsFlag != "" {
		metrics = strings.Split(*metricsFlag, ",")
	}
	probe := compare.LWTProbe(e.stores[0], uniqueID("probe"))
	ctx := ctxFor(t, 40*time.Minute)
	rep, err := compare.Run(ctx, testr.New(t), cfg, selected, probe, metrics)
	if rep == nil {
		t.Fatal(err)
	}
	if err == nil && (len(metrics) == 0 || slices.Contains(metrics, compare.MetricLoad)) {
		// The budgets are stated at the library's default lease: the same systems again, at that lease.
		var atDefault []compare.System
		for _, sys := range systems(t, e, cfg.LoadLease, logr.Discard()) {
			switch sys.(type) {
			case *compare.Baton, *compare.Sidecars:
				if *systemsFlag == "" || matchesAny(sys.Name(), *systemsFlag) {
					atDefault = append(atDefault, sys)
				}
			}
		}
		err = compare.LoadSystems(ctx, testr.New(t), cfg, atDefault, rep)
	}
	var buf bytes.Buffer
	fmt.Fprintf(&buf, "\n%s\n\n", machine())
	if werr := rep.Markdown(&buf); werr != nil {
		t.Fatal(werr)
	}
	_, _ = io.Copy(os.Stdout, bytes.NewReader(buf.Bytes()))
	if *outFlag != "" {
		if werr := os.WriteFile(*outFlag, buf.Bytes(), 0o644); werr != nil {
			t.Fatal(werr)
		}
	}
	if *jsonFlag != "" {
		var js bytes.Buffer
		if werr := rep.Results(machine()).WriteJSON(&js); werr != nil {
			t.Fatal(werr)
		}
		if werr := os.WriteFile(*jsonFlag, js.Bytes(), 0o644); werr != nil {
			t.Fatal(werr)
		}
	}
	if err != nil {
		t.Fatalf("run stopped early (tables above are partial): %v", err)
	}
}

func matchesAny(name, list string) bool {
	for _, s := range strings.Split(list, ",") {
		if s != "" && strings.Contains(strings.ToLower(name), strings.ToLower(s)) {
			return true
		}
	}
	return false
}

// machine describes where the numbers come from.
func machine() string {
	load, _ := os.ReadFile("/proc/loadavg")
	fields := strings.Fields(string(load))
	if len(fields) > 3 {
		fields = fields[:3]
	}
	return fmt.Sprintf("Machine: %d CPUs, %s/%s, %s; Cassandra %s (one node, %d MiB heap, C1 JIT; keyspace RF 1, schema v%d); kube-apiserver %s and etcd %s (envtest); load average before the run %s.",
		runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, runtime.Version(), localcassandra.DefaultVersion, 512,
		cassandrastore.SchemaVersion, localkube.KubernetesVersion, localkube.EtcdVersion, strings.Join(fields, " "))
}
