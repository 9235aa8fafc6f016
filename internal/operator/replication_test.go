package operator_test

import (
	"strings"
	"testing"

	"github.com/baton-dev/baton/internal/operator"
)

// TestSingleCopyReplicationNeedsFlag: --cassandra-schema-replication that keeps 1 copy of each lock is
// refused, with a message naming --cassandra-allow-single-replica, unless that flag is given or the operator
// creates no schema (--cassandra-ensure-schema=false). A unit test of the flag parser: nothing is started.
func TestSingleCopyReplicationNeedsFlag(t *testing.T) {
	env := func(string) string { return "baton-system" }
	base := []string{"--sidecar-image=baton:dev"}
	for _, tc := range []struct {
		replication string
		single      string // "" when accepted without the flag
	}{
		{"{'class': 'SimpleStrategy', 'replication_factor': 1}", "replication_factor"},
		{"{'class':'SimpleStrategy','replication_factor':'1'}", "replication_factor"},
		{"{'class': 'NetworkTopologyStrategy', 'dc1': '1', 'dc2': 1}", "dc1, dc2"},
		{"{'class': 'NetworkTopologyStrategy', 'dc1': 3, 'dc2': 1}", "dc2"},
		{"{'class': 'NetworkTopologyStrategy', 'dc1': '2/1'}", "dc1"},
		{"{'class': 'NetworkTopologyStrategy', 'dc1': '3/1'}", ""},
		{"{'class': 'NetworkTopologyStrategy', 'dc1': 3, 'dc2': 0}", ""},
		{"{'class': 'SimpleStrategy', 'replication_factor': 3}", ""},
		{"{'class': 'NetworkTopologyStrategy', 'replication_factor': 11}", ""},
		{operator.DefaultSchemaReplication, ""},
	} {
		t.Run(tc.replication, func(t *testing.T) {
			args := append(base[:len(base):len(base)], "--cassandra-schema-replication="+tc.replication)
			_, err := operator.ParseOptions(args, env)
			if tc.single == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			want := "--cassandra-schema-replication=" + tc.replication + " keeps only 1 copy of each lock (replication factor 1 at: " + tc.single + ")"
			if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "--cassandra-allow-single-replica") {
				t.Fatalf("got %v, want an error containing %q and naming --cassandra-allow-single-replica", err, want)
			}
			for _, extra := range []string{"--cassandra-allow-single-replica", "--cassandra-ensure-schema=false"} {
				o, err := operator.ParseOptions(append(args, extra), env)
				if err != nil {
					t.Errorf("with %s: %v", extra, err)
				}
				if extra == "--cassandra-allow-single-replica" && !o.AllowSingleReplica {
					t.Errorf("--cassandra-allow-single-replica did not set AllowSingleReplica")
				}
			}
		})
	}
}
