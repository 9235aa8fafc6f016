package cassandrastore

import (
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
)

// CloseSession closes s but stops waiting after timeout: gocql's Session.Close can deadlock while
// its control connection reconnects (apache/cassandra-gocql-driver#1687 and relatives), for
// example after the network to Cassandra stalled. It reports whether the close finished; when it
// did not, the session's goroutines are left behind.
func CloseSession(s *gocql.Session, timeout time.Duration) bool {
	done := make(chan struct{})
	go func() {
		s.Close()
		close(done)
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}
