package storepool

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-dev/baton/lock/cassandrastore"
)

// TestFailedConnectionBacksOff: a connection whose attempt failed is not tried again before its
// retry time; each failure in a row doubles the delay up to the maximum; the error says why and
// when; a success forgets the failures.
func TestFailedConnectionBacksOff(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	p := New(WithRetry(time.Second, 4*time.Second))
	p.now = func() time.Time { return now }
	p.retry.jitter = func(d time.Duration) time.Duration { return d } // no jitter: exact delays
	defer p.Close()
	// Nothing listens on port 1: every attempt is refused at once.
	conn := cassandrastore.Connection{ContactPoints: []string{"127.0.0.1:1"}, Keyspace: "baton"}
	ctx := context.Background()

	for i, wantDelay := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 4 * time.Second} {
		_, err := p.Store(ctx, conn)
		var rerr *RetryError
		if !errors.As(err, &rerr) || !errors.Is(err, ErrBackingOff) {
			t.Fatalf("attempt %d: error %v, want a *RetryError", i+1, err)
		}
		if rerr.Failures != i+1 || !rerr.Since.Equal(time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)) {
			t.Errorf("attempt %d: %d failures since %v, want %d since the first", i+1, rerr.Failures, rerr.Since, i+1)
		}
		if got := rerr.RetryAt.Sub(now); got != wantDelay {
			t.Errorf("attempt %d: retry after %v, want %v", i+1, got, wantDelay)
		}
		for _, want := range []string{"127.0.0.1:1", "the operator tries again at " + rerr.RetryAt.Format(time.RFC3339)} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("attempt %d: error %q lacks %q", i+1, err, want)
			}
		}
		// Until the retry time the same error comes back without an attempt.
		now = rerr.RetryAt.Add(-time.Millisecond)
		if _, again := p.Store(ctx, conn); again != rerr {
			t.Errorf("attempt %d: a call before the retry time returned %v, want the same *RetryError", i+1, again)
		}
		if n := p.Len(); n != 0 {
			t.Errorf("%d pooled connections while backing off, want 0", n)
		}
		now = rerr.RetryAt
	}

	// Another connection is not held back by this one's failures.
	other := conn
	other.Keyspace = "other"
	var rerr *RetryError
	if _, err := p.Store(ctx, other); !errors.As(err, &rerr) || rerr.Failures != 1 {
		t.Errorf("another connection: %v, want its own first failure", err)
	}

	// A success forgets the failures (simulated: the negative cache's own step).
	p.mu.Lock()
	p.retry.succeedLocked(key(conn))
	p.mu.Unlock()
	if _, err := p.Store(ctx, conn); !errors.As(err, &rerr) || rerr.Failures != 1 {
		t.Errorf("after a success: %v, want a first failure again", err)
	}
}

func TestEqualJitter(t *testing.T) {
	for range 1000 {
		if d := equalJitter(10 * time.Second); d < 5*time.Second || d > 10*time.Second {
			t.Fatalf("equalJitter(10s) = %v, want within [5s, 10s]", d)
		}
	}
}

// fakeTarPit is a test fake of a hung Cassandra contact point: a loopback listener that accepts
// every TCP connection and never answers.
func fakeTarPit(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}

// TestHungStoreHoldsCallersForTheConnectWait: while an attempt to a contact point that never
// answers goes on, the call that started it returns ErrConnecting after the connect wait and a
// later call returns it at once (not the attempt's own result, which comes only after the
// driver's 5 s connect timeout); once the attempt failed, the RetryError comes back; during the
// retry, past the connect wait, callers get that failure with the retry's start.
func TestHungStoreHoldsCallersForTheConnectWait(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: this test waits out the driver's 5 s connect timeout twice (make test runs it)")
	}
	var clock atomic.Int64 // the pool's time, read by its connecting goroutines too
	clock.Store(time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC).UnixNano())
	p := New(WithConnectWait(50 * time.Millisecond))
	p.now = func() time.Time { return time.Unix(0, clock.Load()) }
	defer p.Close()
	conn := cassandrastore.Connection{ContactPoints: []string{fakeTarPit(t)}, Keyspace: "baton"}
	ctx := context.Background()
	if _, err := p.Store(ctx, conn); !errors.Is(err, ErrConnecting) || !strings.Contains(err.Error(), conn.ContactPoints[0]) {
		t.Fatalf("first call: %v, want ErrConnecting naming the contact point", err)
	}
	// A call after the wait has passed does not wait again: a context that never ends shows it
	// (had it waited, it would return the attempt's RetryError, seconds later).
	clock.Add(int64(time.Second))
	if _, err := p.Store(ctx, conn); !errors.Is(err, ErrConnecting) {
		t.Fatalf("second call: %v, want ErrConnecting at once", err)
	}
	first := waitAttempt(t, p, conn)
	if first.Failures != 1 || !strings.Contains(first.Error(), "unable to create session") {
		t.Errorf("first failure: %v, want one naming the driver's error", first)
	}

	clock.Store(first.RetryAt.UnixNano()) // the retry starts now
	_, err := p.Store(ctx, conn)
	var trying *RetryError
	if !errors.As(err, &trying) || trying.Trying.IsZero() || trying.Failures != 1 ||
		!strings.Contains(err.Error(), "the operator is trying again since") {
		t.Fatalf("during the retry: %v, want the last failure, trying again", err)
	}
	if second := waitAttempt(t, p, conn); second.Failures != 2 {
		t.Errorf("after the retry: %v, want the second failure", second)
	}
}

// waitAttempt waits for the attempt under way for conn to fail, and returns its RetryError.
// Waiting also keeps the attempt's goroutine from outliving the test (TestMain checks for leaks).
func waitAttempt(t *testing.T, p *Pool, conn cassandrastore.Connection) *RetryError {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := p.Store(context.Background(), conn)
		var rerr *RetryError
		if errors.As(err, &rerr) && rerr.Trying.IsZero() {
			return rerr
		}
		if !errors.Is(err, ErrConnecting) && !errors.As(err, &rerr) {
			t.Fatalf("while connecting: %v, want ErrConnecting or a RetryError", err)
		}
		if time.Now().After(deadline) {
			t.Fatal("the attempt to the tar pit did not end within 30 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}
