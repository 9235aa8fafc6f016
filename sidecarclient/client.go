package sidecarclient

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// maxEventLine bounds one line of the event stream a Client accepts.
const maxEventLine = 1 << 20

// MaxWait is the longest wait the sidecar accepts in one acquire or yield request (it answers a
// longer one 400 bad_request); to wait longer, ask again.
const MaxWait = 10 * time.Minute

// Client talks to a sidecar's API, for the baton CLI, apps written in Go, and tests. It is safe
// for concurrent use. Methods that fail because of the server's answer return *Error.
type Client struct {
	hc   *http.Client
	base string
}

// New returns a Client that speaks HTTP over the unix socket at socketPath (usually
// SocketPath). Nothing is dialled until the first call.
func New(socketPath string) *Client {
	tr := &http.Transport{
		Proxy: nil, // a local socket is never proxied
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socketPath)
		},
		MaxIdleConns:    4,
		IdleConnTimeout: 90 * time.Second,
	}
	return &Client{hc: &http.Client{Transport: tr}, base: "http://baton"}
}

// NewTCP returns a Client for the API at baseURL, e.g. "http://127.0.0.1:8711". Proxy
// settings from the environment are ignored; the API is local.
func NewTCP(baseURL string) *Client {
	tr := &http.Transport{Proxy: nil, MaxIdleConns: 4, IdleConnTimeout: 90 * time.Second}
	return &Client{hc: &http.Client{Transport: tr}, base: strings.TrimRight(baseURL, "/")}
}

// Locks returns every lock declared for the pod, in declaration order.
func (c *Client) Locks(ctx context.Context) ([]LockStatus, error) {
	var out struct {
		Locks []LockStatus `json:"locks"`
	}
	if err := c.do(ctx, http.MethodGet, "/v1/locks", nil, &out); err != nil {
		return nil, err
	}
	return out.Locks, nil
}

// Lock returns one lock's status; an undeclared lock is an *Error matching ErrUnknownLock.
func (c *Client) Lock(ctx context.Context, lockID string) (LockStatus, error) {
	var st LockStatus
	err := c.do(ctx, http.MethodGet, lockPath(lockID, ""), nil, &st)
	return st, err
}

// Acquire asks for a Try-mode lock, waiting up to wait on the server (0: try once) and no longer
// than ctx allows. It returns without error only when it was granted the lock: state held with a
// fencing token; use that token in every write to the protected resource and pass it to Release.
// When the lock is held elsewhere it returns an *Error matching ErrLocked whose Lock field has
// the lock's status; when another process of this pod is acquiring it or holds it, one matching
// ErrAcquiring or ErrHeldByPod. A 200 answer that is not a grant (older sidecars answered so while
// another acquisition was in progress) is an error matching ErrAcquiring, never a grant.
func (c *Client) Acquire(ctx context.Context, lockID string, wait time.Duration) (LockStatus, error) {
	var st LockStatus
	if err := c.do(ctx, http.MethodPost, lockPath(lockID, "/acquire"), waitBody(wait), &st); err != nil {
		return st, err
	}
	if !st.Granted() {
		return st, fmt.Errorf("baton: acquire of lock %q answered state %q with token %d, which grants nothing (another acquisition of it in this pod, or the end of an earlier grant): %w",
			lockID, st.State, st.Token, ErrAcquiring)
	}
	return st, nil
}

// waitBody is the body of an acquire request: none for 0.
func waitBody(wait time.Duration) any {
	if wait == 0 {
		return nil
	}
	return AcquireRequest{Wait: new(wait.String())}
}

// tokenOf is the token field of a release or yield request: nil for 0 (any grant).
func tokenOf(token int64) *int64 {
	if token == 0 {
		return nil
	}
	return &token
}

// Release releases the Try-mode grant of lockID with token (LockStatus.Token of the Acquire that
// granted it). When the pod holds the lock under another grant (this one ended, and another
// process of the pod acquired it since) the sidecar leaves it alone and Release returns an *Error
// matching ErrTokenMismatch; when the pod holds nothing, ErrNotHeld. Token 0 releases whatever
// grant the pod holds, whoever acquired it: only for tools that know no other process of the pod
// uses the lock.
func (c *Client) Release(ctx context.Context, lockID string, token int64) (LockStatus, error) {
	var body any
	if t := tokenOf(token); t != nil {
		body = ReleaseRequest{Token: t}
	}
	var st LockStatus
	err := c.do(ctx, http.MethodPost, lockPath(lockID, "/release"), body, &st)
	return st, err
}

// Yield steps down: the sidecar releases the lock this pod holds and queues again behind the
// waiters, so that the next one is granted now. With a token (non-zero) it yields only that
// grant, as Release does. In Blocking mode the sidecar takes its turn again by itself and the
// answer comes once the lock is released (state waiting); in Try mode the sidecar acquires again,
// waiting up to wait (0: one try), and answers as Acquire does: only an answer for which
// LockStatus.Granted holds is a new grant.
func (c *Client) Yield(ctx context.Context, lockID string, token int64, wait time.Duration) (LockStatus, error) {
	var body any
	if wait != 0 || token != 0 {
		req := YieldRequest{Token: tokenOf(token)}
		if wait != 0 {
			req.Wait = new(wait.String())
		}
		body = req
	}
	var st LockStatus
	err := c.do(ctx, http.MethodPost, lockPath(lockID, "/yield"), body, &st)
	return st, err
}

// Ready reports whether the pod holds every required lock (GET /readyz answered 200 or 503).
func (c *Client) Ready(ctx context.Context) (bool, error) {
	resp, err := c.send(ctx, http.MethodGet, "/readyz", nil)
	if err != nil {
		return false, err
	}
	defer drainClose(resp.Body)
	switch resp.StatusCode {
	case http.StatusOK:
		return true, nil
	case http.StatusServiceUnavailable:
		return false, nil
	}
	return false, readError(resp)
}

// Events subscribes to the event stream. Events arrive on the first channel in the order the
// sidecar sent them; it closes when the stream ends. The second channel then yields the error that
// ended the stream, if any (ctx.Err() after cancellation, an *Error if the server refused), and
// closes; a stream the sidecar ended cleanly (it is shutting down: assume every lock lost) yields
// no error. The goroutine reading the stream stops when ctx is done. Events returns before the
// subscription is made; Subscribe returns after.
func (c *Client) Events(ctx context.Context) (<-chan Event, <-chan error) {
	events := make(chan Event)
	errs := make(chan error, 1)
	go pump(ctx, func() (*http.Response, error) { return c.subscribe(ctx) }, events, errs)
	return events, errs
}

// Subscribe is Events, returning once the sidecar has taken the subscription, or with the error
// that kept it from being made (the sidecar is not up yet, or refused it). Every event the
// sidecar publishes after Subscribe returns arrives on the channel, so an application that
// subscribes before it acquires, yields or releases sees each acquired, released and lost event
// of its own calls, unless the stream ends (see Events), after which it subscribes again.
func (c *Client) Subscribe(ctx context.Context) (<-chan Event, <-chan error, error) {
	resp, err := c.subscribe(ctx)
	if err != nil {
		return nil, nil, err
	}
	events := make(chan Event)
	errs := make(chan error, 1)
	go pump(ctx, func() (*http.Response, error) { return resp, nil }, events, errs)
	return events, errs, nil
}

// pump reads the event stream that open opens into events until it ends, sends the error that
// ended it (if any) to errs, and closes both.
func pump(ctx context.Context, open func() (*http.Response, error), events chan<- Event, errs chan<- error) {
	defer close(errs)
	defer close(events)
	resp, err := open()
	if err == nil {
		err = readEvents(ctx, resp, events)
	}
	if err != nil {
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		errs <- err
	}
}

// subscribe opens the event stream. The sidecar sends its headers once the subscription is
// registered, so when subscribe returns every later event is on the stream.
func (c *Client) subscribe(ctx context.Context) (*http.Response, error) {
	resp, err := c.send(ctx, http.MethodGet, "/v1/events", nil)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		defer drainClose(resp.Body)
		return nil, readError(resp)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		drainClose(resp.Body)
		return nil, fmt.Errorf("baton: event stream has Content-Type %q, want text/event-stream", ct)
	}
	return resp, nil
}

// readEvents sends the events of the stream resp to events until it ends, and closes resp.
func readEvents(ctx context.Context, resp *http.Response, events chan<- Event) error {
	defer drainClose(resp.Body)
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 4096), maxEventLine)
	var name string
	var data []string
	for sc.Scan() {
		line := strings.TrimSuffix(sc.Text(), "\r")
		if line == "" { // dispatch
			if len(data) > 0 {
				var ev Event
				if err := json.Unmarshal([]byte(strings.Join(data, "\n")), &ev); err != nil {
					return fmt.Errorf("baton: decode %q event: %w", name, err)
				}
				if ev.Type == "" {
					ev.Type = EventType(name)
				}
				select {
				case events <- ev:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			name, data = "", nil
			continue
		}
		if strings.HasPrefix(line, ":") {
			continue // comment, e.g. keep-alive
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "event":
			name = value
		case "data":
			data = append(data, value)
		}
		// id, retry and unknown fields are ignored, as the SSE spec says.
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("baton: read event stream: %w", err)
	}
	return nil
}

// do sends a request with an optional JSON body and decodes a 200 answer into out.
func (c *Client) do(ctx context.Context, method, path string, body, out any) error {
	resp, err := c.send(ctx, method, path, body)
	if err != nil {
		return err
	}
	defer drainClose(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return readError(resp)
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("baton: decode answer to %s %s: %w", method, path, err)
	}
	return nil
}

func (c *Client) send(ctx context.Context, method, path string, body any) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, fmt.Errorf("baton: encode request: %w", err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return nil, fmt.Errorf("baton: build request %s %s: %w", method, path, err)
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("baton: %s %s: %w", method, path, err)
	}
	return resp, nil
}

// readError turns a non-200 answer into *Error.
func readError(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, MaxBodyBytes))
	e := &Error{Status: resp.StatusCode}
	var body ErrorBody
	if err := json.Unmarshal(b, &body); err == nil && body.Error != "" {
		e.Message, e.Code = body.Error, body.Code
		if body.LockStatus != nil && (body.LockID != "" || body.State != "") {
			e.Lock = body.LockStatus
		}
		return e
	}
	e.Message = strings.TrimSpace(string(b))
	if e.Message == "" {
		e.Message = "(no error message)"
	}
	return e
}

func lockPath(lockID, suffix string) string {
	return LocksPath + url.PathEscape(lockID) + suffix
}

// drainClose reads a little of what is left so the connection can be reused, then closes.
func drainClose(rc io.ReadCloser) {
	_, _ = io.CopyN(io.Discard, rc, 4096)
	_ = rc.Close()
}
