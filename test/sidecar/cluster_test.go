package main_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/testing/testenv"
)

// TestClusterName: a sidecar told the Cassandra cluster its lock lives on holds the lock there,
// and refuses to start, saying why, when its contact points reach another cluster.
func TestClusterName(t *testing.T) {
	ns := fmt.Sprintf("cluster-%d", time.Now().UnixNano())
	cl := storeReady(t)
	// localcassandra names its clusters baton-<Name>.
	right := startSidecar(t, ns, "right", "BATON_CASSANDRA_CLUSTER_NAME=baton-sidecar-single")
	onlyHolder(t, []*sidecarProc{right}, 10*time.Second)

	out := &testenv.SyncBuffer{}
	cmd := exec.Command(binary)
	cmd.Env = append(os.Environ(),
		"BATON_LOCK_IDS=orders", "BATON_CASSANDRA_HOSTS="+strings.Join(cl.Hosts(), ","),
		"BATON_CASSANDRA_KEYSPACE="+keyspace, "BATON_LEASE="+lease.String(),
		"POD_NAMESPACE="+ns, "POD_NAME=wrong", "POD_UID=uid-wrong", "BATON_SOCKET="+filepath.Join(t.TempDir(), "wrong.sock"),
		"BATON_METRICS_ADDR=127.0.0.1:0", "BATON_TRAFFIC_POLICY=None",
		"BATON_CASSANDRA_CLUSTER_NAME=baton-prod-eu")
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 1 {
			t.Errorf("sidecar on the wrong cluster exited with %v, want exit status 1", err)
		}
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		<-exited
		t.Fatalf("the sidecar kept running on the wrong cluster:\n%s", out)
	}
	for _, want := range []string{"refusing to start", "--cassandra-cluster-name (BATON_CASSANDRA_CLUSTER_NAME)",
		`\"baton-prod-eu\"`, `\"baton-sidecar-single\"`, "new DistributedLock"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the sidecar's output lacks %s:\n%s", want, out)
		}
	}
	if !right.ready(t) {
		t.Error("the sidecar on the right cluster lost its lock")
	}
}
