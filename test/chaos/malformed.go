//go:build linux

package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/baton-dev/baton/sidecarclient"
)

// malformedRequests are requests the socket API must answer with a JSON error and without acting:
// broken HTTP that net/http itself rejects, and requests the API's own handlers refuse. LOCK is
// the run's lock. None of them may release or acquire anything.
var malformedRequests = []string{
	"GARBAGE\r\n\r\n",
	"GET /v1/locks HTTP/1.1\r\n\r\n",
	"GET /v1/locks HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
	"GET /v1/locks HTTP/9.9\r\nHost: a\r\n\r\n",
	"POST /v1/locks/LOCK/acquire HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n",
	"POST /v1/locks/LOCK/acquire HTTP/1.1\r\nHost: a\r\nContent-Length: abc\r\n\r\n",
	"POST /v1/locks/LOCK/acquire HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\nContent-Length: 9\r\n\r\n{\"wait\":7",
	"POST /v1/locks/LOCK/acquire HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\nContent-Length: 14\r\n\r\n{\"wait\":\"-1s\"}",
	"DELETE /v1/locks/LOCK HTTP/1.1\r\nHost: a\r\n\r\n",
	"POST /v1/locks/no-such-lock/release HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n",
	"GET /v1/locks/%zz HTTP/1.1\r\nHost: a\r\n\r\n",
	"GET /v1/locks/" + strings.Repeat("x", 300) + " HTTP/1.1\r\nHost: a\r\n\r\n",
	"OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n",
}

// flood sends malformed requests to every sidecar, round robin, for d, and returns how many it
// sent. An answer that is not a JSON error is an anomaly; a sidecar that is down (restarting, or
// killed by the nemesis) is skipped.
func (r *run) flood(ctx context.Context, d time.Duration) int {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	n := 0
	for ctx.Err() == nil {
		for _, p := range r.procs {
			req := strings.ReplaceAll(malformedRequests[n%len(malformedRequests)], "LOCK", r.cfg.Lock)
			n++
			if err := askMalformed(ctx, p.socket, req); err != nil {
				r.anomaly(Anomaly{"api", fmt.Sprintf("%s: %q: %v", p.name, clip(req), err)})
			}
		}
	}
	return n
}

// askMalformed sends one malformed request and checks the answer is an error in the API's JSON
// form. It returns nil when the sidecar is not there to answer.
func askMalformed(ctx context.Context, socket, req string) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		return nil // not listening: being restarted or killed
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		return nil // killed meanwhile
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("no answer: %w", err)
	}
	defer resp.Body.Close()
	var body sidecarclient.ErrorBody
	derr := json.NewDecoder(resp.Body).Decode(&body)
	switch {
	case resp.StatusCode < 400:
		return fmt.Errorf("status %d, want an error", resp.StatusCode)
	case resp.Header.Get("Content-Type") != "application/json":
		return fmt.Errorf("status %d with Content-Type %q, want application/json", resp.StatusCode, resp.Header.Get("Content-Type"))
	case derr != nil || body.Code == "" || body.Error == "":
		return fmt.Errorf("status %d with body %+v (%v), want an error with a code and a message", resp.StatusCode, body, derr)
	}
	return nil
}

func clip(s string) string {
	if len(s) > 60 {
		return s[:60] + "…"
	}
	return s
}
