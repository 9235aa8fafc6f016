package demoapp

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"
)

// Ask asks the demo app (or the Service in front of it) at url for its status, on a connection of
// its own: kube-proxy picks a pod per connection, so every call is a fresh pick. An app without a
// lock answers 503 with its status too; only an answer that is not the demo app's is an error.
func Ask(ctx context.Context, url string) (Status, error) {
	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	return AskWith(ctx, &http.Client{Transport: tr, Timeout: 2 * time.Second}, url)
}

// AskWith is Ask through client (for example one that dials from inside a pod's network
// namespace); whether connections are reused is client's business.
func AskWith(ctx context.Context, client *http.Client, url string) (Status, error) {
	var st Status
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return st, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err := json.Unmarshal(body, &st); err != nil || st.Pod == "" {
		return st, fmt.Errorf("%s: %s %q: not the demo app's status", url, resp.Status, body)
	}
	return st, nil
}

// Answer is one call of a Poller.
type Answer struct {
	At     time.Time // when the request was sent: the answer says what held at or after it
	Status Status
	Err    error
}

// Poller asks a URL over and over, each time on a new connection, and keeps every answer.
type Poller struct {
	mu      sync.Mutex
	answers []Answer
	notify  func(Answer)
	cancel  context.CancelFunc
	done    chan struct{}
}

// Poll starts asking url every interval (each request bounded by a second) until Stop or ctx
// ends. notify, when not nil, is called with each answer as it comes, from the polling goroutine.
func Poll(ctx context.Context, url string, interval time.Duration, notify func(Answer)) *Poller {
	ctx, cancel := context.WithCancel(ctx)
	p := &Poller{notify: notify, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		for ctx.Err() == nil {
			reqCtx, cancel := context.WithTimeout(ctx, time.Second)
			sent := time.Now()
			st, err := Ask(reqCtx, url)
			cancel()
			if ctx.Err() != nil {
				return // the request was cut by Stop, not answered
			}
			a := Answer{At: sent, Status: st, Err: err}
			p.mu.Lock()
			p.answers = append(p.answers, a)
			p.mu.Unlock()
			if p.notify != nil {
				p.notify(a)
			}
			select {
			case <-ctx.Done():
			case <-time.After(interval):
			}
		}
	}()
	return p
}

// Since returns the answers from the i-th on.
func (p *Poller) Since(i int) []Answer {
	p.mu.Lock()
	defer p.mu.Unlock()
	if i > len(p.answers) {
		i = len(p.answers)
	}
	return append([]Answer(nil), p.answers[i:]...)
}

// Stop stops asking and returns every answer.
func (p *Poller) Stop() []Answer {
	p.cancel()
	<-p.done
	return p.Since(0)
}

// Failover finds, in answers in the order they were sent, the last answer from pod old before
// the first answer from any other pod, that first answer's time, and how many requests failed
// in between. firstNew is zero when no other pod answered.
func Failover(answers []Answer, old string) (lastOld, firstNew time.Time, failed int) {
	for _, a := range answers {
		switch {
		case a.Err == nil && a.Status.Pod == old:
			lastOld, failed = a.At, 0
		case a.Err == nil:
			return lastOld, a.At, failed
		default:
			failed++
		}
	}
	return lastOld, time.Time{}, failed
}
