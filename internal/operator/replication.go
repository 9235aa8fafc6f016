package operator

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// replicationEntry matches one numeric entry of a CQL replication map, e.g. 'replication_factor': 1,
// 'dc1': '3' or 'dc1': '3/1' (3 replicas, 1 of them transient). The class entry has no number and
// does not match.
var replicationEntry = regexp.MustCompile(`'([^']*)'\s*:\s*'?\s*([0-9]+)(?:\s*/\s*([0-9]+))?\s*'?`)

// singleCopyDCs returns the entries of the CQL replication map replication (the replication_factor
// of SimpleStrategy or NetworkTopologyStrategy, or a data centre of the latter) that keep exactly
// one full copy of each row: there, a lost node stops the locks and a lost disk loses their fencing
// tokens. Entries with 0 copies (a data centre left out) are not reported. It reads the map
// leniently and does not check that Cassandra would accept it: that is left to Cassandra.
func singleCopyDCs(replication string) []string {
	var single []string
	for _, m := range replicationEntry.FindAllStringSubmatch(replication, -1) {
		full, err := strconv.Atoi(m[2])
		if err != nil {
			continue
		}
		if m[3] != "" {
			if transient, err := strconv.Atoi(m[3]); err == nil {
				full -= transient
			}
		}
		if full == 1 {
			single = append(single, m[1])
		}
	}
	return single
}

// checkSchemaReplication refuses a replication that keeps one copy of a lock somewhere, unless
// allowSingle. It says nothing about a replication it cannot read.
func checkSchemaReplication(replication string, allowSingle bool) error {
	single := singleCopyDCs(replication)
	if len(single) == 0 || allowSingle {
		return nil
	}
	return fmt.Errorf("--cassandra-schema-replication=%s keeps only 1 copy of each lock (replication factor 1 at: %s): a lost or restarting node stops the locks and "+
		"a lost disk loses their fencing tokens; give 3 replicas per data centre, e.g. %s, or --cassandra-allow-single-replica "+
		"for a one-node development Cassandra (or --cassandra-ensure-schema=false when the keyspace is made beforehand)",
		replication, strings.Join(single, ", "), DefaultSchemaReplication)
}
