package sidecarapi

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/sidecarclient"
)

// TestServerAnswersEveryMalformedRequestInJSON sends requests that net/http rejects before any
// handler runs (it answers those itself, in plain text) and `OPTIONS *` (which it answers itself
// with an empty 200 unless told not to): through NewServer and Serve, each answer is an error in
// the API's JSON form with a code and a message, and the connection then serves nothing else.
func TestServerAnswersEveryMalformedRequestInJSON(t *testing.T) {
	h, err := newHandler(t, &fakeService{t: t})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := NewServer(h)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close(); <-done })

	big := strings.Repeat("x", http.DefaultMaxHeaderBytes+4096)
	for _, tc := range []struct {
		name, request string
		status        int
	}{
		{"garbage request line", "GARBAGE\r\n\r\n", 400},
		{"no Host header", "GET /v1/locks HTTP/1.1\r\n\r\n", 400},
		{"two Host headers", "GET /v1/locks HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400},
		{"space in a header name", "GET /v1/locks HTTP/1.1\r\nHost: a\r\nBad Header: y\r\n\r\n", 400},
		{"bad Content-Length", "POST /v1/locks/a/acquire HTTP/1.1\r\nHost: a\r\nContent-Length: abc\r\n\r\n", 400},
		{"bad request target", "GET http://[::1 HTTP/1.1\r\nHost: a\r\n\r\n", 400},
		{"unsupported HTTP version", "GET /v1/locks HTTP/9.9\r\nHost: a\r\n\r\n", 505},
		{"unsupported transfer coding", "POST /v1/locks/a/acquire HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n", 501},
		{"headers too large", "GET /v1/locks HTTP/1.1\r\nHost: a\r\nX-Big: " + big + "\r\n\r\n", 431},
		{"OPTIONS *", "OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			go func() { _, _ = io.WriteString(c, tc.request) }()
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			raw, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			spec, err := loadAPISpec()
			if err != nil {
				t.Fatal(err)
			}
			x := exchange{status: resp.StatusCode, header: resp.Header, answer: raw}
			if err := spec.checkUnroutedAnswer(t.Context(), nil, x); err != nil {
				t.Errorf("%s does not describe the answer %d %s: %v", apiDocPath, resp.StatusCode, bytes.TrimSpace(raw), err)
			}
			var body sidecarclient.ErrorBody
			derr := json.Unmarshal(raw, &body)
			switch {
			case tc.status != 0 && resp.StatusCode != tc.status:
				t.Errorf("status %d, want %d", resp.StatusCode, tc.status)
			case resp.StatusCode < 400:
				t.Errorf("status %d, want an error", resp.StatusCode)
			case resp.Header.Get("Content-Type") != "application/json":
				t.Errorf("Content-Type %q, want application/json", resp.Header.Get("Content-Type"))
			case derr != nil || body.Code == "" || body.Error == "":
				t.Errorf("body %+v, %v; want an ErrorBody with code and message", body, derr)
			}
			t.Logf("%d %s: %s", resp.StatusCode, body.Code, body.Error)
		})
	}
}
