// Command go is the Go example of fenced writes under a baton lock: it follows the sidecar's event
// stream, acquires the lock (Try mode; only an answer with state held and a token is a grant),
// sends its write with its fencing token to an HTTP resource that rejects tokens lower than the
// highest it has accepted (409), and releases its grant by its token. A writer
// whose lease ran out while it was paused therefore cannot overwrite the next holder's work.
//
// Environment: BATON_SOCKET and BATON_LOCKS (set by the injecting webhook; the first lock is
// used), EXAMPLE_RESOURCE_URL (where writes go: POST {"token":N,"writer":"...","data":"..."}) and
// EXAMPLE_WAIT (how long to wait for the lock, default 10s). It prints one JSON line with what it
// did and exits 0, or 1 with a message on stderr.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/baton-dev/baton/sidecarclient"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	lockID, _, _ := strings.Cut(os.Getenv("BATON_LOCKS"), ",")
	resource := os.Getenv("EXAMPLE_RESOURCE_URL")
	if os.Getenv("BATON_SOCKET") == "" || lockID == "" || resource == "" {
		return errors.New("set BATON_SOCKET, BATON_LOCKS and EXAMPLE_RESOURCE_URL")
	}
	wait := 10 * time.Second
	if w := os.Getenv("EXAMPLE_WAIT"); w != "" {
		d, err := time.ParseDuration(w)
		if err != nil {
			return fmt.Errorf("EXAMPLE_WAIT: %w", err)
		}
		wait = d
	}
	client := sidecarclient.New(os.Getenv("BATON_SOCKET"))

	// Subscribe first, then acquire: every event of our own calls is then on the stream.
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	events, _, err := client.Subscribe(sctx)
	if err != nil {
		return fmt.Errorf("subscribing to the sidecar's events: %w", err)
	}
	var mu sync.Mutex
	lost := map[int64]bool{}
	go func() {
		for e := range events {
			if e.Type == sidecarclient.EventLost && e.LockID == lockID {
				mu.Lock()
				lost[e.Token] = true // stop writing with it at once
				mu.Unlock()
			}
		}
	}()

	// Acquire returns without error only with a grant: state held and a fencing token. Another
	// process of this pod acquiring or holding the lock is an error (ErrAcquiring, ErrHeldByPod).
	st, err := client.Acquire(ctx, lockID, wait)
	if err != nil {
		return fmt.Errorf("acquiring %s: %w", lockID, err)
	}
	if !st.Granted() { // Acquire checks it; an app that speaks HTTP itself must too
		return fmt.Errorf("acquiring %s: not granted: %+v", lockID, st)
	}
	// Release this grant only, by its token: if it ended and another process of the pod was
	// granted the lock since, the sidecar leaves that grant alone.
	defer func() { _, _ = client.Release(context.WithoutCancel(ctx), lockID, st.Token) }()
	mu.Lock()
	held := !lost[st.Token]
	mu.Unlock()
	written := false
	if held {
		if written, err = fencedWrite(ctx, resource, st.Token, fmt.Sprintf("written by go with token %d", st.Token)); err != nil {
			return err
		}
	}
	// A writer with an older token (a paused earlier holder) is turned away by the resource.
	stale, err := fencedWrite(ctx, resource, st.Token-1, "stale")
	if err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(map[string]any{"lock": lockID, "token": st.Token, "written": written, "staleAccepted": stale})
}

// fencedWrite sends one write with token and reports whether the resource accepted it.
func fencedWrite(ctx context.Context, url string, token int64, data string) (bool, error) {
	body, err := json.Marshal(map[string]any{"token": token, "writer": "go", "data": data})
	if err != nil {
		return false, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return false, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false, fmt.Errorf("writing to %s: %w", url, err)
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		return true, nil
	case http.StatusConflict:
		return false, nil // a higher token wrote since
	}
	return false, fmt.Errorf("writing to %s: status %s", url, resp.Status)
}
