package sidecarapi

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"

	"github.com/baton-dev/baton/internal/testing/testenv"
	"github.com/baton-dev/baton/sidecarclient"
)

// serveBounded serves a handler for f with NewServer and opts on a unix socket in a temporary
// directory, and returns the socket's path and the server's log lines. The server is closed when
// the test ends, and Serve must have returned by then.
func serveBounded(t *testing.T, f *fakeService, opts ...ServerOption) (string, <-chan string) {
	t.Helper()
	path, logs, _ := serveBoundedServer(t, f, opts...)
	return path, logs
}

// serveBoundedServer is serveBounded that also returns the server.
func serveBoundedServer(t *testing.T, f *fakeService, opts ...ServerOption) (string, <-chan string, *Server) {
	t.Helper()
	h, err := newHandler(t, f)
	if err != nil {
		t.Fatal(err)
	}
	logs := make(chan string, 100)
	logger := funcr.New(func(prefix, args string) {
		select {
		case logs <- args:
		default:
		}
	}, funcr.Options{})
	srv, err := NewServer(h, append([]ServerOption{WithServerLogger(logger)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "baton.sock")
	ln, err := ListenUnix(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		_ = srv.Close()
		select {
		case err := <-done:
			if !errors.Is(err, http.ErrServerClosed) {
				t.Errorf("Serve returned %v, want http.ErrServerClosed", err)
			}
		case <-time.After(5 * time.Second):
			t.Error("Serve did not return within 5s of Close")
		}
	})
	return path, logs, srv
}

// idleConns is how many connections srv counts as idle.
func idleConns(srv *Server) int {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	return len(srv.idle)
}

// dialSend connects to the socket at path and writes request.
func dialSend(t *testing.T, path, request string) net.Conn {
	t.Helper()
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if _, err := io.WriteString(c, request); err != nil {
		t.Fatal(err)
	}
	return c
}

// getLocks is a complete request on a keep-alive connection.
const getLocks = "GET /v1/locks HTTP/1.1\r\nHost: baton\r\n\r\n"

// readAnswer reads one answer from br within d and discards its body.
func readAnswer(c net.Conn, br *bufio.Reader, d time.Duration) (*http.Response, error) {
	_ = c.SetReadDeadline(time.Now().Add(d))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return nil, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp, err
}

// TestServerEndsSlowClients: the review held 200 slow-body connections for 12 s and more. Here
// 200 connections send the headers and 1 byte of a 64-byte body, 10 do the same on the event
// stream (which takes no body, and would otherwise stream for ever), 20 send part of their
// headers, 1 sends nothing and 1 sends a request and then stays idle: the server answers the
// slow bodies 408 in the API's JSON and closes every connection within its read (or idle)
// timeout, plus a margin for a loaded machine.
func TestServerEndsSlowClients(t *testing.T) {
	const (
		readTimeout = 500 * time.Millisecond
		idleTimeout = time.Second
		margin      = 3 * time.Second
	)
	f := &fakeService{t: t}
	withDeclared(f)
	never := make(chan sidecarclient.Event) // a subscription that stays open and silent
	f.subscribe = func() (<-chan sidecarclient.Event, func()) { return never, func() {} }
	path, _ := serveBounded(t, f, WithReadTimeout(readTimeout), WithIdleTimeout(idleTimeout), WithMaxConns(300))

	type client struct {
		kind string
		conn net.Conn
		br   *bufio.Reader
	}
	var clients []client
	add := func(kind, request string) *client {
		c := dialSend(t, path, request)
		clients = append(clients, client{kind, c, bufio.NewReader(c)})
		return &clients[len(clients)-1]
	}
	start := time.Now()
	for range 200 {
		add("slow body", "POST /v1/locks/a/acquire HTTP/1.1\r\nHost: baton\r\nContent-Type: application/json\r\nContent-Length: 64\r\n\r\n{")
	}
	for range 10 {
		add("slow body", "GET /v1/events HTTP/1.1\r\nHost: baton\r\nContent-Length: 10\r\n\r\nx")
	}
	for range 20 {
		add("slow headers", "POST /v1/locks/a/acquire HTTP/1.1\r\nHost: baton\r\nContent-Le")
	}
	add("silent", "")
	idle := add("idle", getLocks)
	if resp, err := readAnswer(idle.conn, idle.br, 5*time.Second); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("idle connection's request: %v, %v; want 200", resp, err)
	}

	var wg sync.WaitGroup
	var mu sync.Mutex
	var slowest time.Duration
	for _, c := range clients {
		wg.Go(func() {
			// The client's own bound, far past the server's: hitting it means the server held on.
			_ = c.conn.SetReadDeadline(time.Now().Add(readTimeout + idleTimeout + margin))
			if c.kind == "slow body" {
				resp, err := http.ReadResponse(c.br, nil)
				if err != nil {
					t.Errorf("%s: no answer: %v", c.kind, err)
					return
				}
				var body sidecarclient.ErrorBody
				derr := json.NewDecoder(resp.Body).Decode(&body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusRequestTimeout || derr != nil || body.Code != sidecarclient.CodeBadRequest {
					t.Errorf("%s: answer %d %+v (%v), want 408 with code %s", c.kind, resp.StatusCode, body, derr, sidecarclient.CodeBadRequest)
				}
			}
			_, err := io.Copy(io.Discard, c.br)
			took := time.Since(start)
			if errors.Is(err, os.ErrDeadlineExceeded) {
				t.Errorf("%s: connection still open after %v", c.kind, took.Round(time.Millisecond))
				return
			}
			mu.Lock()
			slowest = max(slowest, took)
			mu.Unlock()
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	t.Logf("%d connections closed by the server, the last %v after the first was opened (read timeout %v, idle timeout %v)",
		len(clients), slowest.Round(time.Millisecond), readTimeout, idleTimeout)
}

// TestServerLongPollsOutliveTimeouts: an acquire that waits and an event stream that stays silent
// both last five times the read and idle timeouts, are not cut, and answer in the end; the
// connection then serves another request.
func TestServerLongPollsOutliveTimeouts(t *testing.T) {
	const (
		timeout = 200 * time.Millisecond
		poll    = 5 * timeout
	)
	f := &fakeService{t: t}
	withDeclared(f)
	f.acquire = func(ctx context.Context, lockID string, wait time.Duration) (sidecarclient.LockStatus, error) {
		select {
		case <-ctx.Done():
			return sidecarclient.LockStatus{LockID: lockID, State: sidecarclient.StateWaiting}, ctx.Err()
		case <-time.After(wait): // the long poll under test: it ends when its wait does
			return sidecarclient.LockStatus{LockID: lockID, State: sidecarclient.StateHeld, Token: 42}, nil
		}
	}
	feed := newEventFeed(f)
	path, _ := serveBounded(t, f, WithReadTimeout(timeout), WithIdleTimeout(timeout))
	c := sidecarclient.New(path)

	t.Run("acquire with wait", func(t *testing.T) {
		start := time.Now()
		st, err := c.Acquire(t.Context(), "a", poll)
		if err != nil || st.Token != 42 {
			t.Fatalf("Acquire with wait %v after %v: %+v, %v; want the grant with token 42", poll, time.Since(start), st, err)
		}
		if took := time.Since(start); took < poll {
			t.Fatalf("Acquire answered after %v, before its wait of %v: the fake did not wait", took, poll)
		}
		if _, err := c.Locks(t.Context()); err != nil {
			t.Fatalf("a request after the long poll: %v", err)
		}
	})
	t.Run("silent event stream", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		events, errs := c.Events(ctx)
		waitFor(t, feed.subscribed, "the handler to subscribe")
		want := sidecarclient.Event{Type: sidecarclient.EventAcquired, LockID: "a", Token: 9}
		select {
		case <-time.After(poll): // silence on the stream, far past both timeouts
		case err := <-errs:
			t.Fatalf("event stream ended after less than %v of silence: %v", poll, err)
		}
		select {
		case feed.ch <- want:
		case <-time.After(5 * time.Second):
			t.Fatal("the handler no longer reads the subscription: the stream was cut")
		}
		select {
		case got := <-events:
			if got.Type != want.Type || got.LockID != want.LockID || got.Token != want.Token {
				t.Fatalf("event %+v, want %+v", got, want)
			}
		case err := <-errs:
			t.Fatalf("event stream ended instead of delivering the event: %v", err)
		case <-time.After(5 * time.Second):
			t.Fatal("no event within 5s")
		}
		cancel()
		waitFor(t, feed.cancelled, "the handler to cancel its subscription")
	})
}

// TestServerLimitsConnections: with a limit of 4, four connections with a request in progress
// (its headers still arriving) leave a fifth unanswered (it waits, unaccepted) and the server logs
// that the limit is reached; when one of the four closes, the fifth is served.
func TestServerLimitsConnections(t *testing.T) {
	const limit = 4
	f := &fakeService{t: t}
	withDeclared(f)
	path, logs := serveBounded(t, f, WithMaxConns(limit), WithReadTimeout(time.Minute), WithIdleTimeout(time.Minute))

	var held []net.Conn
	for range limit {
		held = append(held, dialSend(t, path, "POST /v1/locks/a/acquire HTTP/1.1\r\nHost: baton\r\nContent-Le"))
	}
	fifth := dialSend(t, path, getLocks)
	select {
	case line := <-logs:
		if !strings.Contains(line, "connection limit reached") || !strings.Contains(line, `"limit"=4`) {
			t.Errorf("log line %s, want the connection limit reached with its value", line)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no log line within 5s that the connection limit is reached")
	}
	br := bufio.NewReader(fifth)
	if resp, err := readAnswer(fifth, br, 300*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("fifth connection over a limit of %d: answer %v, %v; want none while the others are busy", limit, resp, err)
	}
	_ = held[0].Close()
	if resp, err := readAnswer(fifth, br, 5*time.Second); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("fifth connection once one closed: %v, %v; want 200", resp, err)
	}
}

// TestServerClosesIdleConnectionsAtTheLimit: a client that opens a keep-alive connection per
// request (a new sidecarclient each time) leaves them idle until its own idle timeout (90 s for
// Go's transport). At the limit, the server closes the connection idle the longest to serve a new
// one, instead of letting idle connections lock the API out until the idle timeout.
func TestServerClosesIdleConnectionsAtTheLimit(t *testing.T) {
	const limit = 4
	f := &fakeService{t: t}
	withDeclared(f)
	path, logs, srv := serveBoundedServer(t, f, WithMaxConns(limit), WithIdleTimeout(time.Minute))

	type conn struct {
		c  net.Conn
		br *bufio.Reader
	}
	var idle []conn
	for range limit {
		c := dialSend(t, path, getLocks)
		br := bufio.NewReader(c)
		if resp, err := readAnswer(c, br, 5*time.Second); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("connection within the limit: %v, %v; want 200", resp, err)
		}
		idle = append(idle, conn{c, br})
		// The server marks a connection idle just after writing its answer: wait for it, so that
		// the connections went idle in the order they were opened.
		testenv.WaitFor(t, fmt.Sprintf("the server to count %d idle connections", len(idle)), 5*time.Second,
			func() bool { return idleConns(srv) == len(idle) })
	}
	fifth := dialSend(t, path, getLocks)
	if resp, err := readAnswer(fifth, bufio.NewReader(fifth), 5*time.Second); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("fifth connection while %d others are idle: %v, %v; want 200", limit, resp, err)
	}
	// The oldest idle connection was closed for it: its next read ends at once.
	_ = idle[0].c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := idle[0].br.ReadByte(); !errors.Is(err, io.EOF) {
		t.Errorf("oldest idle connection: read %v, want EOF (closed by the server)", err)
	}
	// The others still serve requests.
	for i, c := range idle[1:] {
		if _, err := io.WriteString(c.c, getLocks); err != nil {
			t.Fatalf("idle connection %d: %v", i+1, err)
		}
		if resp, err := readAnswer(c.c, c.br, 5*time.Second); err != nil || resp.StatusCode != http.StatusOK {
			t.Errorf("idle connection %d after the fifth was served: %v, %v; want 200", i+1, resp, err)
		}
	}
	select {
	case line := <-logs:
		if !strings.Contains(line, "connection limit reached") {
			t.Errorf("log line %s, want the connection limit reached", line)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no log line within 5s that the connection limit is reached")
	}
}

// TestNewServerValidates: bad options are refused before anything is served.
func TestNewServerValidates(t *testing.T) {
	h, err := newHandler(t, &fakeService{t: t})
	if err != nil {
		t.Fatal(err)
	}
	for name, opts := range map[string][]ServerOption{
		"zero read timeout":     {WithReadTimeout(0)},
		"negative idle timeout": {WithIdleTimeout(-time.Second)},
		"zero connection limit": {WithMaxConns(0)},
		"nil option":            {nil},
	} {
		if _, err := NewServer(h, opts...); err == nil {
			t.Errorf("%s: NewServer accepted it", name)
		}
	}
	if _, err := NewServer(nil); err == nil {
		t.Error("NewServer accepted a nil handler")
	}
}
