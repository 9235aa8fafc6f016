package cassandrastore_test

import (
	"context"
	"errors"
	"fmt"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/baton-dev/baton/lock"
)

// errFenced means a newer holder has written the row: this holder's token is stale.
var errFenced = errors.New("fenced out by a newer holder")

// A Cassandra table protected by fencing tokens: each row carries the token of its last writer
// (created with fence = 0), and every write is a lightweight transaction that applies only while
// its token is at least that one, so a holder paused past its lease cannot overwrite the work of
// the holder after it. "<=" lets one holder write many times with its token; use "<" if every
// write must come from a newer grant.
//
//	CREATE TABLE shop.orders (id text PRIMARY KEY, state text, fence bigint);
//	INSERT INTO shop.orders (id, state, fence) VALUES ('o-1', 'new', 0) IF NOT EXISTS;
func Example_fencedUpdate() {
	var (
		ctx     = context.Background()
		session *gocql.Session // connected to the cluster holding shop.orders
		lease   *lock.Lease    // from locker.Acquire(ctx, "shop/orders")
	)
	if session == nil || lease == nil {
		return // this example only shows the statements
	}
	err := lease.Fenced(ctx, func(ctx context.Context, token int64) error {
		current := map[string]any{}
		applied, err := session.Query(`UPDATE shop.orders SET state = ?, fence = ? WHERE id = ? IF fence <= ?`,
			"shipped", token, "o-1", token).MapScanCASContext(ctx, current)
		switch {
		case err != nil:
			return err // outcome unknown: read the row (SERIAL) before deciding anything
		case !applied:
			return fmt.Errorf("%w: the row has fence %v, this holder %d", errFenced, current["fence"], token)
		}
		return nil
	})
	if err != nil {
		fmt.Println(err)
	}
}
