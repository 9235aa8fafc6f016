package sidecarapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"

	"github.com/baton-dev/baton/sidecarclient"
)

// Defaults of the server options.
const (
	// DefaultReadTimeout bounds how long one request (request line, headers and body) may take
	// to arrive.
	DefaultReadTimeout = 10 * time.Second
	// DefaultIdleTimeout is how long a keep-alive connection may wait for its next request. It is
	// longer than sidecarclient's idle timeout (90s), so that a Go client always closes an idle
	// connection first and never sends a request on one the server is closing.
	DefaultIdleTimeout = 2 * time.Minute
	// DefaultMaxConns is how many connections the server serves at once, over all its listeners.
	DefaultMaxConns = 64
	// maxHeaderBytes bounds a request's line and headers; the API's requests need a few hundred
	// bytes.
	maxHeaderBytes = 64 << 10
)

// ServerOption configures NewServer.
type ServerOption func(*serverOptions)

type serverOptions struct {
	log         logr.Logger
	readTimeout time.Duration
	idleTimeout time.Duration
	maxConns    int
}

// WithServerLogger sets the logger for the connection limit (level 0 when it is reached, at most
// once a minute). Default: discard.
func WithServerLogger(l logr.Logger) ServerOption { return func(o *serverOptions) { o.log = l } }

// WithReadTimeout sets how long one request, headers and body, may take to arrive, from its first
// byte (from the connection's start for the first request). A request slower than that is
// answered 408 when its headers were read, and its connection closed. Once the body is read the
// bound no longer applies: a long-polling acquire or an event stream lasts as long as it needs.
// Must be positive. Default: DefaultReadTimeout (10s).
func WithReadTimeout(d time.Duration) ServerOption {
	return func(o *serverOptions) { o.readTimeout = d }
}

// WithIdleTimeout sets how long a keep-alive connection may wait between requests before the
// server closes it. Must be positive. Default: DefaultIdleTimeout (2m).
func WithIdleTimeout(d time.Duration) ServerOption {
	return func(o *serverOptions) { o.idleTimeout = d }
}

// WithMaxConns sets how many connections the server serves at once over all its listeners; more
// wait, unaccepted, until one closes (see Server). Must be positive. Default: DefaultMaxConns (64).
func WithMaxConns(n int) ServerOption { return func(o *serverOptions) { o.maxConns = n } }

func (o *serverOptions) validate() error {
	if o.log.GetSink() == nil {
		o.log = logr.Discard()
	}
	switch {
	case o.readTimeout <= 0:
		return fmt.Errorf("api: read timeout must be positive, got %v", o.readTimeout)
	case o.idleTimeout <= 0:
		return fmt.Errorf("api: idle timeout must be positive, got %v", o.idleTimeout)
	case o.maxConns <= 0:
		return fmt.Errorf("api: connection limit must be positive, got %d", o.maxConns)
	}
	return nil
}

// Server is the API's HTTP server around a handler (NewHandler). It bounds what clients can hold:
//
//   - each request must arrive, headers and body, within the read timeout; a long poll (acquire
//     or yield with a wait, the event stream) is not cut by it once its request is read, and there
//     is no write timeout on the whole answer: the event stream bounds each of its writes itself;
//   - a keep-alive connection is closed after the idle timeout;
//   - at most maxConns connections are served at once. At the limit, the server first closes the
//     connection that has been idle (between requests) the longest, so that keep-alive
//     connections a client no longer uses (one per short-lived client) cannot lock the API out
//     until the idle timeout. When none is idle, one new connection per listener is accepted and
//     waits for a connection to close or go idle; the others are not accepted: they wait in the
//     kernel's listen queue (a client's connect succeeds and its request waits; once the queue
//     is full, connects fail at once) and are served in turn.
//     Waiting costs the sidecar nothing, where accepting a connection to refuse it would cost a
//     descriptor and a goroutine each time, the very things the limit protects; every slot is
//     freed within the read or idle timeout unless a legitimate long poll holds it. The limit
//     being reached is logged, at most once a minute.
//
// Closing an idle connection races with its client sending the next request on it: that client
// then sees the connection closed without an answer (as with any keep-alive connection a server
// closes) and must retry on a new one; it happens only at the limit. The server does not bound
// how long a client waits for a slot (its own timeout does), nor how many connections one client
// may take: the socket is the pod's, shared by its processes.
type Server struct {
	http  *http.Server
	slots chan struct{} // one element per connection being served
	log   logr.Logger

	lastFullLog atomic.Int64 // unix nanoseconds of the last "limit reached" log line

	mu         sync.Mutex
	idle       map[net.Conn]time.Time // connections between requests, and since when
	becameIdle chan struct{}          // signalled (without blocking) when a connection goes idle
}

// NewServer returns the server of the API around handler (NewHandler), validating opts first.
// Serve it with Serve, so that every answer is JSON: the server answers `OPTIONS *` through the
// handler, not with Go's empty 200.
func NewServer(handler http.Handler, opts ...ServerOption) (*Server, error) {
	if handler == nil {
		return nil, errors.New("api: NewServer needs a handler, got nil")
	}
	o := serverOptions{log: logr.Discard(), readTimeout: DefaultReadTimeout, idleTimeout: DefaultIdleTimeout, maxConns: DefaultMaxConns}
	for _, opt := range opts {
		if opt == nil {
			return nil, errors.New("api: NewServer got a nil ServerOption")
		}
		opt(&o)
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	s := &Server{
		http: &http.Server{
			Handler:           handler,
			ReadHeaderTimeout: o.readTimeout,
			ReadTimeout:       o.readTimeout,
			IdleTimeout:       o.idleTimeout,
			// No WriteTimeout: it would cut long polls and event streams, which bound their own
			// writes (writeJSON and the event stream set a deadline on each).
			MaxHeaderBytes:               maxHeaderBytes,
			DisableGeneralOptionsHandler: true,
		},
		slots:      make(chan struct{}, o.maxConns),
		log:        o.log,
		idle:       make(map[net.Conn]time.Time),
		becameIdle: make(chan struct{}, 1),
	}
	s.http.ConnState = s.trackIdle
	return s, nil
}

// trackIdle keeps the set of idle connections: net/http reports a connection idle once it has
// answered a request and waits for the next one, and active from the first byte of that one.
func (s *Server) trackIdle(c net.Conn, state http.ConnState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if state == http.StateIdle {
		s.idle[c] = time.Now()
		select {
		case s.becameIdle <- struct{}{}:
		default:
		}
	} else {
		delete(s.idle, c)
	}
}

// closeOldestIdle closes the connection idle the longest, which frees its slot, and reports
// whether there was one.
func (s *Server) closeOldestIdle() bool {
	s.mu.Lock()
	var oldest net.Conn
	var since time.Time
	for c, t := range s.idle {
		if oldest == nil || t.Before(since) {
			oldest, since = c, t
		}
	}
	delete(s.idle, oldest)
	s.mu.Unlock()
	if oldest == nil {
		return false
	}
	_ = oldest.Close()
	return true
}

// Serve serves on ln until the server is shut down or closed, with Go's own answers to requests
// it cannot parse (400, 431, 501, 505 in plain text, written before any handler runs) turned into
// the API's JSON error answers. It may be called for several listeners; the connection limit is
// shared by all. It returns http.ErrServerClosed after Shutdown or Close.
func (s *Server) Serve(ln net.Listener) error {
	return s.http.Serve(&limitListener{Listener: jsonErrorListener{ln}, srv: s, closed: make(chan struct{})})
}

// Shutdown stops accepting connections and waits, until ctx ends, for the requests in progress
// to finish; see http.Server.Shutdown. Event streams and long polls end only with the Service's
// subscription or their own wait: call Close when ctx ends.
func (s *Server) Shutdown(ctx context.Context) error { return s.http.Shutdown(ctx) }

// Close closes the listeners and every connection at once.
func (s *Server) Close() error { return s.http.Close() }

// fullLogEvery is how often at most the server logs that the connection limit is reached.
const fullLogEvery = time.Minute

// makeRoom waits for a free connection slot for a connection already accepted, closing the
// connection idle the longest whenever there is one, until closed is closed (false).
func (s *Server) makeRoom(closed <-chan struct{}) bool {
	now, last := time.Now().UnixNano(), s.lastFullLog.Load()
	if now-last >= int64(fullLogEvery) && s.lastFullLog.CompareAndSwap(last, now) {
		s.log.Info("API connection limit reached: closing the connection idle the longest, "+
			"or waiting for one to close", "limit", cap(s.slots))
	}
	for {
		select {
		case s.slots <- struct{}{}:
			return true
		default:
		}
		if s.closeOldestIdle() {
			continue // its Close freed a slot, unless another listener took it first
		}
		select {
		case s.slots <- struct{}{}:
			return true
		case <-s.becameIdle:
		case <-closed:
			return false
		}
	}
}

func (s *Server) freeSlot() { <-s.slots }

// limitListener accepts connections while the server has a free slot; at the limit it accepts
// one more and holds it until makeRoom finds it a slot, so that an idle connection is closed only
// for a client that is actually there.
type limitListener struct {
	net.Listener
	srv       *Server
	closed    chan struct{}
	closeOnce sync.Once
}

func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.srv.slots <- struct{}{}:
		c, err := l.Listener.Accept()
		if err != nil {
			l.srv.freeSlot()
			return nil, err
		}
		return &limitConn{Conn: c, free: l.srv.freeSlot}, nil
	case <-l.closed:
		return nil, fmt.Errorf("api: accept: %w", net.ErrClosed)
	default:
	}
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if !l.srv.makeRoom(l.closed) {
		_ = c.Close()
		return nil, fmt.Errorf("api: accept: %w", net.ErrClosed)
	}
	return &limitConn{Conn: c, free: l.srv.freeSlot}, nil
}

// Close closes the listener and ends an Accept waiting for a slot.
func (l *limitListener) Close() error {
	l.closeOnce.Do(func() { close(l.closed) })
	return l.Listener.Close()
}

// limitConn gives its slot back when closed, once.
type limitConn struct {
	net.Conn
	free      func()
	closeOnce sync.Once
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.closeOnce.Do(c.free)
	return err
}

// jsonErrorListener hands out connections that rewrite net/http's plain-text error replies.
type jsonErrorListener struct{ net.Listener }

func (l jsonErrorListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &jsonErrorConn{Conn: c}, nil
}

// goErrorHeaders is what net/http writes between the status line and the body of the answers it
// makes itself for unparseable requests, in one Write on the raw connection; handlers' answers go
// through the handler (JSON, or text/event-stream for the event stream) and never carry it.
var goErrorHeaders = []byte("\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n")

// jsonErrorConn is a server connection whose net/http error replies are rewritten as JSON.
type jsonErrorConn struct{ net.Conn }

func (c *jsonErrorConn) Write(b []byte) (int, error) {
	if out, ok := jsonErrorReply(b); ok {
		if _, err := c.Conn.Write(out); err != nil {
			return 0, err
		}
		return len(b), nil
	}
	return c.Conn.Write(b)
}

// jsonErrorReply turns net/http's own plain-text reply b ("HTTP/1.1 400 Bad Request: detail"
// + goErrorHeaders + body) into an answer with an ErrorBody; ok is false for anything else.
func jsonErrorReply(b []byte) (out []byte, ok bool) {
	statusLine, _, found := bytes.Cut(b, goErrorHeaders)
	rest, isHTTP := bytes.CutPrefix(statusLine, []byte("HTTP/1.1 "))
	if !found || !isHTTP || len(rest) < 3 {
		return nil, false
	}
	code, err := strconv.Atoi(string(rest[:3]))
	if err != nil || code < 400 || code > 599 {
		return nil, false
	}
	detail := string(bytes.TrimSpace(rest[3:]))
	e := sidecarclient.ErrorBody{Code: sidecarclient.CodeBadRequest}
	switch code {
	case http.StatusRequestHeaderFieldsTooLarge:
		e.Code = sidecarclient.CodeTooLarge
		e.Error = "request headers too large; send fewer or shorter headers"
	case http.StatusHTTPVersionNotSupported:
		e.Error = fmt.Sprintf("malformed request (%s); speak HTTP/1.1", detail)
	default:
		e.Error = fmt.Sprintf("malformed request (%s); use one of %s", detail, routesHelp)
	}
	body, err := json.Marshal(e)
	if err != nil {
		return nil, false
	}
	body = append(body, '\n')
	var buf bytes.Buffer
	fmt.Fprintf(&buf, "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nCache-Control: no-store\r\n"+
		"X-Content-Type-Options: nosniff\r\nConnection: close\r\nContent-Length: %d\r\n\r\n",
		code, http.StatusText(code), len(body))
	buf.Write(body)
	return buf.Bytes(), true
}
