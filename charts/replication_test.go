package charts_test

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
)

// TestSingleCopyReplicationNeedsConsent: a cassandra.schemaReplication that keeps 1 copy of each
// lock (SimpleStrategy or a data centre at replication factor 1) fails helm template with a message
// that names the value to set, unless cassandra.allowSingleReplica says so (then the operator gets
// --cassandra-allow-single-replica and accepts it) or the operator creates no schema.
func TestSingleCopyReplicationNeedsConsent(t *testing.T) {
	for _, tc := range []struct {
		name, replication string
		single            string // "" when accepted without consent
	}{
		{"SimpleStrategy 1", "{'class': 'SimpleStrategy', 'replication_factor': 1}", "replication_factor"},
		{"SimpleStrategy '1' without spaces", "{'class':'SimpleStrategy','replication_factor':'1'}", "replication_factor"},
		{"NTS every DC at 1", "{'class': 'NetworkTopologyStrategy', 'replication_factor': 1}", "replication_factor"},
		{"NTS two DCs at 1", "{'class': 'NetworkTopologyStrategy', 'dc1': '1', 'dc2': 1}", "dc1, dc2"},
		{"NTS one DC at 1", "{'class': 'NetworkTopologyStrategy', 'dc1': 3, 'dc2': '1'}", "dc2"},
		{"transient leaves 1 full copy", "{'class': 'NetworkTopologyStrategy', 'dc1': '2/1'}", "dc1"},
		{"NTS 3", "{'class': 'NetworkTopologyStrategy', 'dc1': '3', 'dc2': 3}", ""},
		{"DC left out with 0", "{'class': 'NetworkTopologyStrategy', 'dc1': 3, 'dc2': 0}", ""},
		{"SimpleStrategy 3", "{'class': 'SimpleStrategy', 'replication_factor': 3}", ""},
		{"RF 11", "{'class': 'NetworkTopologyStrategy', 'dc1': 11}", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			set := []string{"template", release, chartDir, "--namespace", namespace,
				"--set-json", "cassandra.schemaReplication=\"" + tc.replication + "\""}
			out, err := helm(t, set...)
			if tc.single == "" {
				if err != nil {
					t.Fatalf("refused a replication with more than one copy: %v", err)
				}
				d := get[*appsv1.Deployment](t, decode(t, out), "Deployment", "baton-operator")
				if v, ok := arg(d, "cassandra-allow-single-replica"); ok {
					t.Errorf("--cassandra-allow-single-replica=%s without cassandra.allowSingleReplica", v)
				}
				operatorAccepts(t, d)
				return
			}
			want := "keeps only 1 copy of each lock (replication factor 1 at: " + tc.single + ")"
			if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "cassandra.allowSingleReplica=true") {
				t.Fatalf("helm template succeeded or said the wrong thing: %v\nwant an error containing %q and the value to set", err, want)
			}
			// Consent: the chart renders and the operator accepts the flags it gets.
			d := get[*appsv1.Deployment](t, decode(t, template(t, "--set-json", "cassandra.schemaReplication=\""+tc.replication+"\"",
				"--set", "cassandra.allowSingleReplica=true")), "Deployment", "baton-operator")
			if v, ok := arg(d, "cassandra-allow-single-replica"); !ok || v != "true" {
				t.Errorf("--cassandra-allow-single-replica=%q (set: %v) with cassandra.allowSingleReplica=true", v, ok)
			}
			operatorAccepts(t, d)
			// Without schema creation the replication is not used: no consent needed.
			d = get[*appsv1.Deployment](t, decode(t, template(t, "--set-json", "cassandra.schemaReplication=\""+tc.replication+"\"",
				"--set", "cassandra.ensureSchema=false")), "Deployment", "baton-operator")
			operatorAccepts(t, d)
		})
	}
}
