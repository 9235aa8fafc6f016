package sidecarapi

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-dev/baton/sidecarclient"
)

// eventFeed is a fake subscription: the test pushes events on ch and learns when the handler
// subscribed and cancelled.
type eventFeed struct {
	ch         chan sidecarclient.Event
	subscribed chan struct{}
	cancelled  chan struct{}
	cancels    atomic.Int32
}

func newEventFeed(f *fakeService) *eventFeed {
	e := &eventFeed{ch: make(chan sidecarclient.Event), subscribed: make(chan struct{}, 1), cancelled: make(chan struct{}, 1)}
	f.subscribe = func() (<-chan sidecarclient.Event, func()) {
		e.subscribed <- struct{}{}
		return e.ch, func() {
			if e.cancels.Add(1) == 1 {
				e.cancelled <- struct{}{}
			}
		}
	}
	return e
}

func waitFor(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

func TestEventsOverUnixSocket(t *testing.T) {
	f := &fakeService{t: t}
	feed := newEventFeed(f)
	c, _ := serveUnix(t, f)

	events, errs := c.Events(t.Context())
	waitFor(t, feed.subscribed, "the handler to subscribe")

	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	want := []sidecarclient.Event{
		{Type: sidecarclient.EventAcquired, LockID: "a", Token: 7, Time: t0},
		{Type: sidecarclient.EventLost, LockID: "a", Token: 7, Reason: "lease expired: lock store unreachable\nfor 3 renewals", Time: t0.Add(time.Second)},
		{Type: sidecarclient.EventAcquired, LockID: "a", Token: 9, Time: t0.Add(2 * time.Second)},
		{Type: sidecarclient.EventReleased, LockID: "a", Token: 9, Time: t0.Add(3 * time.Second)},
	}
	go func() {
		for _, ev := range want {
			feed.ch <- ev
		}
		close(feed.ch) // the sidecar shuts down
	}()
	var got []sidecarclient.Event
	for ev := range events {
		got = append(got, ev)
	}
	if len(got) != len(want) {
		t.Fatalf("got %d events %+v, want %d", len(got), got, len(want))
	}
	for i := range want {
		if got[i].Type != want[i].Type || got[i].LockID != want[i].LockID || got[i].Token != want[i].Token ||
			got[i].Reason != want[i].Reason || !got[i].Time.Equal(want[i].Time) {
			t.Errorf("event %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	if err, ok := <-errs; ok {
		t.Errorf("clean end of stream reported error %v", err)
	}
	waitFor(t, feed.cancelled, "the handler to cancel its subscription")
}

// TestSubscribeReturnsOnceSubscribed: Subscribe returns only after the sidecar registered the
// subscription, so an event published right after it arrives; a sidecar that is not up is an error
// at once, not a stream that ends.
func TestSubscribeReturnsOnceSubscribed(t *testing.T) {
	f := &fakeService{t: t}
	feed := newEventFeed(f)
	c, socket := serveUnix(t, f)

	events, errs, err := c.Subscribe(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-feed.subscribed:
	default:
		t.Fatal("Subscribe returned before the sidecar took the subscription")
	}
	want := sidecarclient.Event{Type: sidecarclient.EventReleased, LockID: "a", Token: 3, Time: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	go func() {
		feed.ch <- want
		close(feed.ch)
	}()
	var got []sidecarclient.Event
	for ev := range events {
		got = append(got, ev)
	}
	if len(got) != 1 || got[0].Type != want.Type || got[0].Token != want.Token || !got[0].Time.Equal(want.Time) {
		t.Errorf("events %+v, want [%+v]", got, want)
	}
	if err, ok := <-errs; ok {
		t.Errorf("clean end of stream reported error %v", err)
	}

	if _, _, err := sidecarclient.New(socket + ".missing").Subscribe(t.Context()); err == nil {
		t.Error("Subscribe to a socket nobody serves: no error")
	}
}

func TestEventsKeepAliveAndClientGone(t *testing.T) {
	f := &fakeService{t: t}
	feed := newEventFeed(f)
	_, socket := serveUnix(t, f, WithKeepAlive(10*time.Millisecond))

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://baton/v1/events", nil)
	if err != nil {
		t.Fatal(err)
	}
	raw := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", socket)
	}}}
	resp, err := raw.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q, want text/event-stream", ct)
	}
	sc := bufio.NewScanner(resp.Body)
	keepalives := 0
	for keepalives < 3 && sc.Scan() {
		if sc.Text() == ": keepalive" {
			keepalives++
		}
	}
	if keepalives < 3 {
		t.Fatalf("saw %d keep-alives before the stream ended (%v)", keepalives, sc.Err())
	}
	// The client goes away: the handler must notice and cancel its subscription.
	cancel()
	waitFor(t, feed.cancelled, "the handler to cancel its subscription after the client left")
}

func TestEventsClientCancel(t *testing.T) {
	f := &fakeService{t: t}
	feed := newEventFeed(f)
	c, _ := serveUnix(t, f)

	ctx, cancel := context.WithCancel(t.Context())
	events, errs := c.Events(ctx)
	waitFor(t, feed.subscribed, "the handler to subscribe")
	cancel()
	for range events {
		t.Error("got an event after cancel")
	}
	if err := <-errs; !errors.Is(err, context.Canceled) {
		t.Errorf("error after cancel = %v, want context.Canceled", err)
	}
	waitFor(t, feed.cancelled, "the handler to cancel its subscription")
}

func TestEventsRefused(t *testing.T) {
	f := &fakeService{t: t}
	h, err := newHandler(t, f)
	if err != nil {
		t.Fatal(err)
	}
	// A server without the route: the client reports the 404 as *Error.
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	events, errs := sidecarclient.NewTCP(srv.URL).Events(t.Context())
	for range events {
		t.Error("got an event from a refusing server")
	}
	var apiErr *sidecarclient.Error
	if err := <-errs; !errors.As(err, &apiErr) || apiErr.Status != http.StatusNotFound {
		t.Errorf("error = %v, want *Error 404", err)
	}

	// HEAD answers without subscribing (the fake fails on an unexpected Subscribe).
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodHead, "/v1/events", nil))
	if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != "text/event-stream" {
		t.Errorf("HEAD /v1/events: %d %q", rec.Code, rec.Header().Get("Content-Type"))
	}
}

func TestFormatEvent(t *testing.T) {
	chunk, err := formatEvent(sidecarclient.Event{Type: "lost\r\nevent: acquired", LockID: "a\nb", Token: 3})
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(chunk, "\n\n"), "\n")
	if len(lines) != 2 || lines[0] != "event: lostevent: acquired" || !strings.HasPrefix(lines[1], "data: {") {
		t.Errorf("formatEvent framed %q; want one event line and one data line", chunk)
	}
	if chunk, _ := formatEvent(sidecarclient.Event{}); !strings.HasPrefix(chunk, "event: message\n") {
		t.Errorf("empty type framed as %q, want event: message", chunk)
	}
}

func TestEventsUnencodableTime(t *testing.T) {
	f := &fakeService{t: t}
	f.subscribe = func() (<-chan sidecarclient.Event, func()) {
		ch := make(chan sidecarclient.Event, 1)
		ch <- sidecarclient.Event{Type: sidecarclient.EventLost, LockID: "a", Token: 5, Time: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}
		close(ch)
		return ch, func() {}
	}
	h, err := newHandler(t, f)
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/events", nil))
	// A lost-lock notice must go out even if its time cannot be encoded.
	if !strings.Contains(rec.Body.String(), "event: lost\ndata: {\"type\":\"lost\",\"lockId\":\"a\",\"token\":5,") {
		t.Errorf("lost event with an unencodable time was not sent:\n%s", rec.Body)
	}
}
