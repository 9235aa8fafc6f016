package fencedstore

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/utils/clock"
)

// DefaultHistory is how many writes a resource keeps by default.
const DefaultHistory = 10000

// maxBody bounds a write's body.
const maxBody = 1 << 20

// Store is the fenced store: an http.Handler serving the routes in the package documentation. It
// is safe for concurrent use.
type Store struct {
	clock   clock.PassiveClock
	history int
	log     logr.Logger
	started time.Time
	mux     *http.ServeMux

	mu        sync.Mutex
	resources map[string]*Resource
}

// Option sets an optional knob of New.
type Option func(*Store)

// WithClock sets the clock that timestamps writes (default: the real clock).
func WithClock(c clock.PassiveClock) Option { return func(s *Store) { s.clock = c } }

// WithHistory sets how many recent writes each resource keeps (default DefaultHistory); older
// ones are dropped, the counts are kept.
func WithHistory(n int) Option { return func(s *Store) { s.history = n } }

// WithLogger logs every write as the store judges it: "write accepted" (at V(1)) or "write
// rejected", with
// the resource, writer, token, the highest token after it, its sequence number, and sinceStart,
// its time on the store's clock since New (monotonic with the real clock, so that a history of
// accepts and rejects lines up with other logs of the same process). Default: no log.
func WithLogger(l logr.Logger) Option { return func(s *Store) { s.log = l } }

// New returns an empty Store.
func New(opts ...Option) (*Store, error) {
	s := &Store{clock: clock.RealClock{}, history: DefaultHistory, log: logr.Discard(), resources: map[string]*Resource{}}
	for _, o := range opts {
		o(s)
	}
	s.started = s.clock.Now()
	if s.history < 1 {
		return nil, fmt.Errorf("fencedstore: history of %d writes: keep at least 1", s.history)
	}
	s.mux = http.NewServeMux()
	s.mux.HandleFunc("POST /v1/resources/{name}/writes", s.handleWrite)
	s.mux.HandleFunc("GET /v1/resources/{name}", s.handleResource)
	s.mux.HandleFunc("GET /v1/resources", s.handleResources)
	s.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	return s, nil
}

// ServeHTTP serves the store's API.
func (s *Store) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// Apply applies one write to resource name and returns the store's answer.
func (s *Store) Apply(name string, wr Write) Result {
	s.mu.Lock()
	defer s.mu.Unlock()
	res := s.resources[name]
	if res == nil {
		res = &Resource{Name: name}
		s.resources[name] = res
	}
	rec := Record{Write: wr, Seq: res.Accepted + res.Rejected + 1, Time: s.clock.Now()}
	var out Result
	switch {
	case wr.Token < res.Highest:
		res.Rejected++
		out.Error = fmt.Sprintf("token %d is lower than %d, which %s has written with: %s's lock has passed on", wr.Token, res.Highest, res.HighestWriter, wr.Writer)
	case wr.Token == res.Highest:
		res.Accepted++
		if wr.Writer != res.HighestWriter {
			res.Conflicts++
		}
		rec.Accepted, out.Accepted = true, true
	default:
		res.Accepted++
		res.Highest, res.HighestWriter = wr.Token, wr.Writer
		rec.Accepted, out.Accepted = true, true
	}
	out.Highest = res.Highest
	log, msg := s.log, "write rejected"
	if rec.Accepted {
		log, msg = s.log.V(1), "write accepted"
	}
	log.Info(msg, "resource", name, "writer", wr.Writer, "token", wr.Token, "highest", res.Highest, "seq", rec.Seq,
		"sinceStart", rec.Time.Sub(s.started).String())
	res.Writes = append(res.Writes, rec)
	if over := len(res.Writes) - s.history; over > 0 {
		res.Writes = slices.Delete(res.Writes, 0, over)
	}
	return out
}

// Resource returns a copy of the state of resource name; a resource never written is empty.
func (s *Store) Resource(name string) Resource {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.snapshot(name)
}

func (s *Store) snapshot(name string) Resource {
	res := s.resources[name]
	if res == nil {
		return Resource{Name: name, Writes: []Record{}}
	}
	out := *res
	out.Writes = slices.Clone(res.Writes)
	return out
}

func (s *Store) handleWrite(w http.ResponseWriter, r *http.Request) {
	var wr Write
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&wr); err != nil {
		writeJSON(w, http.StatusBadRequest, Result{Error: fmt.Sprintf("decode the write: %v; send {\"token\":N,\"writer\":\"name\"}", err)})
		return
	}
	if wr.Token < 1 || strings.TrimSpace(wr.Writer) == "" {
		writeJSON(w, http.StatusBadRequest, Result{Error: "a write needs a positive token and a writer"})
		return
	}
	res := s.Apply(r.PathValue("name"), wr)
	status := http.StatusOK
	if !res.Accepted {
		status = http.StatusConflict
	}
	writeJSON(w, status, res)
}

func (s *Store) handleResource(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, s.Resource(r.PathValue("name")))
}

func (s *Store) handleResources(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	names := slices.Sorted(maps.Keys(s.resources))
	out := struct {
		Resources []Resource `json:"resources"`
	}{Resources: []Resource{}}
	for _, n := range names {
		out.Resources = append(out.Resources, s.snapshot(n))
	}
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, out)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
