package demoapp

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/baton-dev/baton/sidecarclient"
)

func TestAskReadsTheStatusOfAnyAnswer(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/held":
			_ = json.NewEncoder(w).Encode(Status{Pod: "demo-0", State: sidecarclient.StateHeld, Token: 7})
		case "/waiting": // an app without the lock answers 503, with its status
			w.WriteHeader(http.StatusServiceUnavailable)
			_ = json.NewEncoder(w).Encode(Status{Pod: "demo-1", State: sidecarclient.StateWaiting})
		default:
			http.Error(w, "not the demo app", http.StatusNotFound)
		}
	}))
	defer srv.Close()
	for path, want := range map[string]Status{
		"/held":    {Pod: "demo-0", State: sidecarclient.StateHeld, Token: 7},
		"/waiting": {Pod: "demo-1", State: sidecarclient.StateWaiting},
	} {
		got, err := Ask(t.Context(), srv.URL+path)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", path, diff)
		}
	}
	if _, err := Ask(t.Context(), srv.URL+"/other"); err == nil {
		t.Error("an answer that is not the demo app's status was taken for one")
	}
}

func TestPollKeepsEveryAnswerInOrder(t *testing.T) {
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := calls.Add(1)
		_ = json.NewEncoder(w).Encode(Status{Pod: "demo-0", Token: n})
	}))
	defer srv.Close()
	notified := make(chan Answer, 100)
	p := Poll(t.Context(), srv.URL, time.Millisecond, func(a Answer) { notified <- a })
	for range 5 {
		select {
		case <-notified:
		case <-time.After(10 * time.Second):
			t.Fatal("no answer in 10s")
		}
	}
	all := p.Stop()
	if len(all) < 5 {
		t.Fatalf("%d answers kept, want at least the 5 notified", len(all))
	}
	for i, a := range all {
		if a.Err != nil || a.Status.Token != int64(i+1) || (i > 0 && a.At.Before(all[i-1].At)) {
			t.Errorf("answer %d: %+v; want call %d, in order", i, a, i+1)
		}
	}
	if got := p.Since(len(all) + 3); len(got) != 0 {
		t.Errorf("Since past the end = %v", got)
	}
}

func TestFailover(t *testing.T) {
	at := func(s int) time.Time { return time.Unix(int64(s), 0) }
	from := func(s int, pod string) Answer { return Answer{At: at(s), Status: Status{Pod: pod}} }
	failed := func(s int) Answer { return Answer{At: at(s), Err: http.ErrServerClosed} }
	answers := []Answer{from(1, "a"), failed(2), from(3, "a"), failed(4), failed(5), from(6, "b"), from(7, "a"), from(8, "b")}
	lastOld, firstNew, n := Failover(answers, "a")
	if !lastOld.Equal(at(3)) || !firstNew.Equal(at(6)) || n != 2 {
		t.Errorf("Failover = %v, %v, %d; want the old pod last at 3, the new first at 6, 2 failed between", lastOld.Unix(), firstNew.Unix(), n)
	}
	if _, firstNew, _ := Failover(answers[:5], "a"); !firstNew.IsZero() {
		t.Errorf("no other pod answered, yet firstNew = %v", firstNew)
	}
}
