package localcassandra

import (
	"context"
	"fmt"
	"time"
)

// RunningOrStart returns the contact points of the single node `go run ./hack/cassandra start`
// runs (Single) when it answers CQL, or else starts own (which dies with this process) and returns
// its contact points with a function that stops it. Progress goes to own.Progress.
func RunningOrStart(ctx context.Context, own Config) (hosts []string, stop func(), err error) {
	shared := Single()
	if nodes, err := Status(ctx, shared); err == nil && len(nodes) > 0 && nodes[0].CQL {
		if own.Progress != nil {
			fmt.Fprintf(own.Progress, "cassandra: using the running node at %s\n", nodes[0].Host)
		}
		return []string{nodes[0].Host}, func() {}, nil
	}
	own.DieWithParent = true
	cluster, err := Start(ctx, own)
	if err != nil {
		return nil, nil, err
	}
	return cluster.Hosts(), func() {
		sctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = cluster.Stop(sctx)
	}, nil
}
