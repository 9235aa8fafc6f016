package sidecarapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/baton-dev/baton/sidecarclient"
)

// NewServer returns the HTTP server of the API around handler (NewHandler). Serve it with Serve,
// so that every answer is JSON: the server answers `OPTIONS *` through the handler, not with
// Go's empty 200.
func NewServer(handler http.Handler) *http.Server {
	return &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second, DisableGeneralOptionsHandler: true}
}

// Serve serves srv on ln, with Go's own answers to requests it cannot parse (400, 431, 501, 505
// in plain text, written before any handler runs) turned into the API's JSON error answers.
func Serve(srv *http.Server, ln net.Listener) error {
	return srv.Serve(jsonErrorListener{ln})
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
