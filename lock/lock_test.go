package lock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/baton-dev/baton/lock"
	"github.com/baton-dev/baton/lock/memstore"
)

func TestOptionsValidation(t *testing.T) {
	owner := lock.Owner{Identity: "ns/pod/uid", Incarnation: "1"}
	store := memstore.New().Client(1, memstore.Faults{})
	for _, tc := range []struct {
		name string
		opts []lock.Option
		want string // substring of the error; "" means valid
	}{
		{"defaults", nil, ""},
		{"short lease", []lock.Option{lock.WithLease(2 * time.Second)}, ""},
		{"zero lease", []lock.Option{lock.WithLease(0)}, "WithLease(0s): the duration must be positive"},
		{"lease too long", []lock.Option{lock.WithLease(2 * time.Hour)}, "outside"},
		{"lease too short", []lock.Option{lock.WithLease(500 * time.Millisecond)}, "outside"},
		{"negative margin", []lock.Option{lock.WithSafetyMargin(-time.Second)}, "must be positive"},
		{"margin half the lease", []lock.Option{lock.WithSafetyMargin(8 * time.Second)}, "less than half the lease"},
		{"renew too slow", []lock.Option{lock.WithRenewInterval(7 * time.Second)}, "at most (lease − safety margin)/2"},
		{"timeout above renew", []lock.Option{lock.WithRenewInterval(time.Second), lock.WithRequestTimeout(2 * time.Second)}, "at most the renew interval"},
		{"waiter poll below poll", []lock.Option{lock.WithPollInterval(time.Second), lock.WithWaiterPollInterval(500 * time.Millisecond)}, "at least the poll interval"},
		{"fractional TTL", []lock.Option{lock.WithQueueEntryTTL(2500 * time.Millisecond)}, "whole seconds"},
		{"TTL too short for polls", []lock.Option{lock.WithWaiterPollInterval(5 * time.Second), lock.WithQueueEntryTTL(10 * time.Second)}, "third of the queue entry TTL"},
		{"nil clock", []lock.Option{lock.WithClock(nil)}, "WithClock(nil)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := lock.New(store, owner, tc.opts...)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.want != "" && (!errors.Is(err, lock.ErrInvalidOption) || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("got %v, want ErrInvalidOption mentioning %q", err, tc.want)
			}
		})
	}
	if _, err := lock.New(nil, owner); !errors.Is(err, lock.ErrInvalidOption) {
		t.Errorf("nil store: %v", err)
	}
	if _, err := lock.New(store, lock.Owner{Identity: "a#b", Incarnation: "1"}); err == nil {
		t.Error("identity with '#' accepted")
	}
}

func TestOwnerRoundTrip(t *testing.T) {
	o, err := lock.NewOwner("shop/orders-7f9c/2d1e")
	if err != nil {
		t.Fatal(err)
	}
	back, err := lock.ParseOwner(o.String())
	if err != nil || back != o {
		t.Fatalf("ParseOwner(%q) = %v, %v", o.String(), back, err)
	}
	for _, bad := range []string{"", "no-incarnation", "#x", "a#", "a b#1"} {
		if _, err := lock.ParseOwner(bad); err == nil {
			t.Errorf("ParseOwner(%q) accepted", bad)
		}
	}
}

func TestValidateLockID(t *testing.T) {
	for id, ok := range map[string]bool{
		"orders": true, "shop/orders": true, "ns/lock:1.x_y-z": true, "日本": true,
		"": false, "a b": false, "tab\t": false, "nul\x00": false, "\xff\xfe": false,
		strings.Repeat("x", lock.MaxIDLength): true, strings.Repeat("x", lock.MaxIDLength+1): false,
	} {
		if err := lock.ValidateLockID(id); (err == nil) != ok {
			t.Errorf("ValidateLockID(%q) = %v, want ok=%v", id, err, ok)
		}
	}
}

// TestLeaseEnds covers loss reasons, Context cancellation and the Locker's held table.
func TestLeaseEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := memstore.New()
		ctx := context.Background()
		a, _ := lock.New(mem.Client(1, memstore.Faults{}), lock.Owner{Identity: "a", Incarnation: "1"}, lock.WithLease(3*time.Second))
		cut := mem.Client(2, memstore.Faults{})
		b, _ := lock.New(cut, lock.Owner{Identity: "b", Incarnation: "1"}, lock.WithLease(3*time.Second))

		la, err := a.Acquire(ctx, "x")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a.Acquire(ctx, "x"); !errors.Is(err, lock.ErrAlreadyHeld) {
			t.Fatalf("second Acquire by the holder: %v", err)
		}
		work, cancel := la.Context(ctx)
		defer cancel()
		if err := la.Release(ctx); err != nil {
			t.Fatal(err)
		}
		<-work.Done()
		if !errors.Is(context.Cause(work), lock.ErrReleased) || !errors.Is(la.Err(), lock.ErrReleased) || la.Valid() {
			t.Fatalf("after Release: cause %v, err %v", context.Cause(work), la.Err())
		}

		lb, err := b.Acquire(ctx, "x")
		if err != nil {
			t.Fatal(err)
		}
		cut.Partition(time.Hour)
		start := time.Now()
		<-lb.Done()
		if !errors.Is(lb.Err(), lock.ErrLeaseExpired) {
			t.Fatalf("partitioned holder: %v", lb.Err())
		}
		if took := time.Since(start); took > 3*time.Second-300*time.Millisecond {
			t.Fatalf("self-fenced after %v: later than lease − margin", took)
		}
		// a waits for b's record to stay unchanged for a full lease, then gets the next token.
		la2, err := a.Acquire(ctx, "x")
		if err != nil {
			t.Fatal(err)
		}
		if la2.Token() != lb.Token()+1 {
			t.Fatalf("token %d after %d", la2.Token(), lb.Token())
		}
		_ = la2.Release(ctx)
		time.Sleep(10 * time.Second) // let b's abandoned lease give up its cleanup
	})
}

// TestFencedEndsWithTheLease: the work's context ends with the lease, with the loss reason as its
// cause, and Fenced reports both the work's error and the loss.
func TestFencedEndsWithTheLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := memstore.New()
		cut := mem.Client(1, memstore.Faults{})
		l, _ := lock.New(cut, lock.Owner{Identity: "a", Incarnation: "1"}, lock.WithLease(3*time.Second))
		lease, err := l.Acquire(context.Background(), "x")
		if err != nil {
			t.Fatal(err)
		}
		defer lease.Release(context.Background())
		cut.Partition(time.Hour)
		var gotToken int64
		err = lease.Fenced(context.Background(), func(ctx context.Context, token int64) error {
			gotToken = token
			<-ctx.Done()
			if !errors.Is(context.Cause(ctx), lock.ErrLeaseExpired) {
				t.Errorf("work context ended with cause %v, want ErrLeaseExpired", context.Cause(ctx))
			}
			return ctx.Err()
		})
		if gotToken != lease.Token() || !errors.Is(err, context.Canceled) || !errors.Is(err, lock.ErrLeaseExpired) {
			t.Fatalf("Fenced = %v with token %d; want the work's error and ErrLeaseExpired, token %d", err, gotToken, lease.Token())
		}
		time.Sleep(10 * time.Second) // let the cut-off lease give up giving the record back
	})
}
