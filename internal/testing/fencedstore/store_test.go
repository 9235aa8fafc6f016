package fencedstore

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/google/go-cmp/cmp"
	clocktesting "k8s.io/utils/clock/testing"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func newServer(t *testing.T, opts ...Option) (*Store, *httptest.Server, *clocktesting.FakePassiveClock) {
	t.Helper()
	clk := clocktesting.NewFakePassiveClock(t0)
	s, err := New(append([]Option{WithClock(clk)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	return s, srv, clk
}

func TestWrites(t *testing.T) {
	s, srv, clk := newServer(t)
	c := NewClient(srv.URL+"/v1/resources/orders", srv.Client())
	steps := []struct {
		write    Write
		accepted bool
		highest  int64
	}{
		{Write{Token: 5, Writer: "a", Data: "1"}, true, 5},
		{Write{Token: 3, Writer: "b"}, false, 5}, // an older holder
		{Write{Token: 5, Writer: "a", Data: "2"}, true, 5},
		{Write{Token: 5, Writer: "b"}, true, 5}, // same token, another writer: a conflict
		{Write{Token: 7, Writer: "b"}, true, 7},
		{Write{Token: 5, Writer: "a"}, false, 7}, // a's lock has passed to b
	}
	for i, st := range steps {
		clk.SetTime(t0.Add(time.Duration(i) * time.Second))
		res, err := c.Write(t.Context(), st.write)
		if st.accepted != (err == nil) || (!st.accepted && !errors.Is(err, ErrRejected)) {
			t.Fatalf("step %d: Write(%+v) error %v, want accepted=%v", i, st.write, err, st.accepted)
		}
		if res.Accepted != st.accepted || res.Highest != st.highest {
			t.Errorf("step %d: Write(%+v) = %+v, want accepted=%v highest=%d", i, st.write, res, st.accepted, st.highest)
		}
		if !st.accepted && !strings.Contains(err.Error(), "lower than") {
			t.Errorf("step %d: error %q does not say why", i, err)
		}
	}

	var got Resource
	getJSON(t, srv, "/v1/resources/orders", &got)
	want := Resource{Name: "orders", Highest: 7, HighestWriter: "b", Accepted: 4, Rejected: 2, Conflicts: 1}
	for i, st := range steps {
		want.Writes = append(want.Writes, Record{Write: st.write, Seq: int64(i + 1), Accepted: st.accepted, Time: t0.Add(time.Duration(i) * time.Second)})
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("GET the resource (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want, s.Resource("orders")); diff != "" {
		t.Errorf("Store.Resource (-want +got):\n%s", diff)
	}
	if empty := s.Resource("other"); empty.Highest != 0 || len(empty.Writes) != 0 {
		t.Errorf("a resource never written: %+v", empty)
	}
}

func TestBadWrites(t *testing.T) {
	_, srv, _ := newServer(t)
	for _, body := range []string{
		`not json`, `{"token":0,"writer":"a"}`, `{"token":-1,"writer":"a"}`, `{"token":1,"writer":" "}`,
		`{"token":1,"writer":"a","extra":true}`,
	} {
		resp, err := srv.Client().Post(srv.URL+"/v1/resources/x/writes", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		var res Result
		_ = json.NewDecoder(resp.Body).Decode(&res)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || res.Error == "" || res.Accepted {
			t.Errorf("POST %s: %s %+v, want 400 with an error", body, resp.Status, res)
		}
	}
	c := NewClient(srv.URL+"/v1/resources/x/", srv.Client())
	if _, err := c.Write(t.Context(), Write{Token: 1}); err == nil || errors.Is(err, ErrRejected) || !strings.Contains(err.Error(), "400") {
		t.Errorf("Write without a writer: %v, want a 400 error that is not ErrRejected", err)
	}
	down := NewClient("http://127.0.0.1:1/v1/resources/x", nil)
	if _, err := down.Write(t.Context(), Write{Token: 1, Writer: "a"}); err == nil || errors.Is(err, ErrRejected) {
		t.Errorf("Write to a closed port: %v, want an error that is not ErrRejected", err)
	}
}

func TestHistoryAndList(t *testing.T) {
	if _, err := New(WithHistory(0)); err == nil {
		t.Error("New(WithHistory(0)) succeeded")
	}
	s, srv, _ := newServer(t, WithHistory(2))
	for tok := int64(1); tok <= 4; tok++ {
		s.Apply("b", Write{Token: tok, Writer: "w"})
	}
	s.Apply("a", Write{Token: 1, Writer: "w"})
	var list struct {
		Resources []Resource `json:"resources"`
	}
	getJSON(t, srv, "/v1/resources", &list)
	if len(list.Resources) != 2 || list.Resources[0].Name != "a" || list.Resources[1].Name != "b" {
		t.Fatalf("GET /v1/resources: %+v, want a then b", list.Resources)
	}
	b := list.Resources[1]
	if b.Accepted != 4 || len(b.Writes) != 2 || b.Writes[0].Seq != 3 || b.Writes[1].Seq != 4 {
		t.Errorf("b: %d accepted, writes %+v; want 4 accepted and writes 3 and 4 kept", b.Accepted, b.Writes)
	}
	resp, err := srv.Client().Get(srv.URL + "/healthz")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("GET /healthz: %v %v", resp, err)
	}
	if resp != nil {
		_ = resp.Body.Close()
	}
}

func TestConcurrentWriters(t *testing.T) {
	s, srv, _ := newServer(t)
	const writers, each = 8, 50
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			c := NewClient(srv.URL+"/v1/resources/r", srv.Client())
			for i := range each {
				_, err := c.Write(t.Context(), Write{Token: int64(i*writers + w + 1), Writer: string(rune('a' + w))})
				if err != nil && !errors.Is(err, ErrRejected) {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	r := s.Resource("r")
	if r.Accepted+r.Rejected != writers*each || r.Highest != writers*each || r.Conflicts != 0 {
		t.Errorf("after %d writes: %d accepted, %d rejected, highest %d, %d conflicts", writers*each, r.Accepted, r.Rejected, r.Highest, r.Conflicts)
	}
	// Accepted tokens never go down.
	var last int64
	for _, rec := range r.Writes {
		if rec.Accepted {
			if rec.Token < last {
				t.Fatalf("write %d accepted token %d after %d", rec.Seq, rec.Token, last)
			}
			last = rec.Token
		}
	}
}

func getJSON(t *testing.T, srv *httptest.Server, path string, v any) {
	t.Helper()
	resp, err := srv.Client().Get(srv.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", path, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatal(err)
	}
}

// TestWriteLog: WithLogger logs each accept and reject with its time on the store's clock since
// the store started.
func TestWriteLog(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(t0)
	var lines []string
	log := funcr.New(func(prefix, args string) { lines = append(lines, args) }, funcr.Options{Verbosity: 1})
	s, err := New(WithClock(clk), WithLogger(log))
	if err != nil {
		t.Fatal(err)
	}
	clk.SetTime(t0.Add(1500 * time.Millisecond))
	s.Apply("orders", Write{Token: 7, Writer: "a"})
	clk.SetTime(t0.Add(2 * time.Second))
	s.Apply("orders", Write{Token: 6, Writer: "b"})
	want := []string{
		`"level"=1 "msg"="write accepted" "resource"="orders" "writer"="a" "token"=7 "highest"=7 "seq"=1 "sinceStart"="1.5s"`,
		`"level"=0 "msg"="write rejected" "resource"="orders" "writer"="b" "token"=6 "highest"=7 "seq"=2 "sinceStart"="2s"`,
	}
	if diff := cmp.Diff(want, lines); diff != "" {
		t.Errorf("log (-want +got):\n%s", diff)
	}
}
