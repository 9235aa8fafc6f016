package operator_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batonv1 "github.com/baton-dev/baton/api/v1"
	"github.com/baton-dev/baton/controllers"
	"github.com/baton-dev/baton/internal/testing/testenv"
)

// TestNoSchemaInAForeignKeyspace: a DistributedLock that keeps the operator's contact points but
// names a keyspace the operator is not configured for does not make the operator create that
// keyspace (on the real Cassandra node, with the operator's settings).
func TestNoSchemaInAForeignKeyspace(t *testing.T) {
	env := up(t)
	ns := newNamespace(t, env, "foreign")
	foreign := fmt.Sprintf("foreign_%d", time.Now().UnixNano()%1_000_000_000)
	create(t, env, newLock(ns, "elsewhere", func(d *batonv1.DistributedLock) {
		d.Spec.Cassandra = &batonv1.CassandraConnection{Keyspace: foreign}
	}))
	testenv.WaitFor(t, "the operator to report on the lock's store", 60*time.Second, func() bool {
		dl := &batonv1.DistributedLock{}
		err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "elsewhere"}, dl)
		return err == nil && meta.FindStatusCondition(dl.Status.Conditions, batonv1.ConditionStoreReachable) != nil
	})
	var replication map[string]string
	err := cassandra.Session(t).Query(`SELECT replication FROM system_schema.keyspaces WHERE keyspace_name = ?`, foreign).Scan(&replication)
	if err == nil {
		t.Errorf("the operator created keyspace %s (replication %v) for a DistributedLock in namespace %s", foreign, replication, ns)
	}
	// The operator runs with --cassandra-allow-anonymous (the local node has no authentication), so
	// it does connect; it reports the missing schema.
	c := waitCondition(t, env, ns, "elsewhere", batonv1.ConditionStoreReachable, metav1.ConditionFalse, controllers.ReasonStoreUnreachable)
	if !strings.Contains(c.Message, foreign) {
		t.Errorf("StoreReachable message %q does not name keyspace %s", c.Message, foreign)
	}
}
