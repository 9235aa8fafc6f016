package sidecar

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr/funcr"

	"github.com/baton-dev/baton/lock/cassandrastore"
)

// TestRetryLogsNoCredentials: the sidecar's log line for each retried failure (Cassandra not
// reachable yet, no schema yet) does not show the user name or password a failure may quote.
func TestRetryLogsNoCredentials(t *testing.T) {
	var mu sync.Mutex
	var lines []string
	log := funcr.New(func(prefix, args string) {
		mu.Lock()
		lines = append(lines, args)
		mu.Unlock()
	}, funcr.Options{})
	creds := testCredentials()
	calls := 0
	_, err := retry(context.Background(), log, "Cassandra not reachable yet, retrying", func() (int, error) {
		if calls++; calls == 1 {
			return 0, errors.New("role tenant_shop (password s3cret-pw) is not reachable")
		}
		return 1, nil
	}, func(error) bool { return true }, func(int, error) {}, creds.Redact)
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(lines) == 0 {
		t.Fatal("no log line for the retried failure")
	}
	for _, l := range lines {
		if strings.Contains(l, "tenant_shop") || strings.Contains(l, "s3cret-pw") {
			t.Errorf("log line shows the credentials: %s", l)
		}
	}
}

func testCredentials() cassandrastore.Credentials {
	return cassandrastore.Credentials{Username: "tenant_shop", Password: "s3cret-pw"}
}
