//go:build linux

package chaos

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"

	"github.com/baton-dev/baton/sidecarclient"
)

// TestParseRunnerLine: the lines `baton run --verbose` logs (funcr, as internal/cli sets it up)
// about its holds become events dated by their own times; other lines do not.
func TestParseRunnerLine(t *testing.T) {
	var lines []string
	log := funcr.New(func(prefix, args string) { lines = append(lines, fmt.Sprintf("baton: %s %s", prefix, args)) },
		funcr.Options{Verbosity: 1})
	since := time.Date(2026, 11, 25, 20, 1, 2, 345678901, time.UTC)
	ended := since.Add(1500 * time.Millisecond)
	log.Info("lock held", "lock", "orders", "token", int64(1795637129599058), "owner", "host/h/1/ab#cd", "since", since.Format(time.RFC3339Nano))
	log.Info("lock lost", "lock", "orders", "token", int64(1795637129599058), "ended", ended.Format(time.RFC3339Nano), "deadline", since.Add(3*time.Second).Format(time.RFC3339Nano))
	log.Info("lock released", "lock", "orders", "token", int64(7), "ended", ended.Format(time.RFC3339Nano))
	log.Info("closing the Cassandra session timed out; exiting anyway")
	want := []sidecarclient.Event{
		{Type: sidecarclient.EventAcquired, LockID: "orders", Token: 1795637129599058, Time: since},
		{Type: sidecarclient.EventLost, LockID: "orders", Token: 1795637129599058, Time: ended},
		{Type: sidecarclient.EventReleased, LockID: "orders", Token: 7, Time: ended},
	}
	for i, line := range lines {
		e, ok := parseRunnerLine(line, "orders")
		if i >= len(want) {
			if ok {
				t.Errorf("%q: parsed as %+v", line, e)
			}
			continue
		}
		if !ok || e.Type != want[i].Type || e.Token != want[i].Token || !e.Time.Equal(want[i].Time) || e.LockID != "orders" {
			t.Errorf("%q: %+v, %v; want %+v", line, e, ok, want[i])
		}
		if wantDeadline := i == 1; wantDeadline != !e.Deadline.IsZero() || wantDeadline && !e.Deadline.Equal(since.Add(3*time.Second)) {
			t.Errorf("%q: deadline %v", line, e.Deadline)
		}
	}
	if !strings.Contains(lines[0], `"msg"="lock held"`) {
		t.Fatalf("funcr's format changed: %s", lines[0])
	}
}
