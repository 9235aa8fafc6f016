package sidecarapi

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"

	"github.com/baton-dev/baton/sidecarclient"
)

// apiDocPath is the API's OpenAPI document, from this package's directory.
const apiDocPath = "../../docs/api/sidecar.openapi.yaml"

// unroutedKey is the document's extension that lists, by status, the component responses that
// answer requests matching no operation: unknown paths and methods, and requests Go's HTTP server
// cannot parse.
const unroutedKey = "x-unrouted-responses"

// apiSpec is the API's OpenAPI document, ready to check traffic against.
type apiSpec struct {
	doc *openapi3.T
	// mux matches requests to the document's operations as the handler's ServeMux matches them
	// to its routes: the document's path templates are ServeMux patterns.
	mux *http.ServeMux
	// unrouted is an operation whose responses are those of x-unrouted-responses.
	unrouted *openapi3.Operation
}

// loadAPISpec loads and validates the document once per test binary; it is read-only afterwards.
// It also teaches openapi3filter to decode text/event-stream bodies (decodeEventStream), once.
var loadAPISpec = sync.OnceValues(func() (*apiSpec, error) {
	openapi3filter.RegisterBodyDecoder("text/event-stream", decodeEventStream)
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromFile(apiDocPath)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", apiDocPath, err)
	}
	if err := doc.Validate(loader.Context); err != nil {
		return nil, fmt.Errorf("%s is not a valid OpenAPI document: %w", apiDocPath, err)
	}
	s := &apiSpec{doc: doc, mux: http.NewServeMux()}
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			pattern := method + " " + path
			names := pathParams(path)
			s.mux.HandleFunc(pattern, func(_ http.ResponseWriter, r *http.Request) {
				m := r.Context().Value(routeMatchKey{}).(*routeMatch)
				m.method, m.path = method, path
				for _, n := range names {
					m.params[n] = r.PathValue(n)
				}
			})
		}
	}
	if s.unrouted, err = unroutedOperation(doc); err != nil {
		return nil, err
	}
	return s, nil
})

// unroutedOperation returns an operation whose responses are the document's x-unrouted-responses.
func unroutedOperation(doc *openapi3.T) (*openapi3.Operation, error) {
	ext, ok := doc.Extensions[unroutedKey].(map[string]any)
	if !ok || len(ext) == 0 {
		return nil, fmt.Errorf("%s has no %s map", apiDocPath, unroutedKey)
	}
	resps := openapi3.NewResponses()
	resps.Delete("default")
	for status, name := range ext {
		n, _ := name.(string)
		ref := doc.Components.Responses[n]
		if _, err := strconv.Atoi(status); err != nil || ref == nil || ref.Value == nil {
			return nil, fmt.Errorf("%s: %s: %q is not a status with the name of a component response", apiDocPath, unroutedKey, status)
		}
		resps.Set(status, ref)
	}
	return &openapi3.Operation{Responses: resps}, nil
}

var pathParamRE = regexp.MustCompile(`\{([^}]+)\}`)

// pathParams returns the names of the parameters in a path template.
func pathParams(path string) []string {
	var names []string
	for _, m := range pathParamRE.FindAllStringSubmatch(path, -1) {
		names = append(names, m[1])
	}
	return names
}

// routeMatchKey is the context key under which apiSpec.route collects what the document's mux
// matched.
type routeMatchKey struct{}

// routeMatch is the document's operation a request matched, if any.
type routeMatch struct {
	method, path string
	params       map[string]string
}

// route finds the document's operation for r as the ServeMux does. With none it returns nil and
// the ServeMux's own answer (status and Allow header) for the document's routes.
func (s *apiSpec) route(r *http.Request) (*routers.Route, map[string]string, *httptest.ResponseRecorder) {
	m := &routeMatch{params: map[string]string{}}
	probe := r.Clone(context.WithValue(context.Background(), routeMatchKey{}, m))
	probe.Body = http.NoBody
	rec := httptest.NewRecorder()
	s.mux.ServeHTTP(rec, probe)
	if m.path == "" {
		return nil, nil, rec
	}
	item := s.doc.Paths.Find(m.path)
	return &routers.Route{Spec: s.doc, Path: m.path, PathItem: item, Method: m.method,
		Operation: item.GetOperation(m.method)}, m.params, rec
}

// exchange is one request the handler served and its answer, as the client saw them.
type exchange struct {
	req     *http.Request // after the handler ran: Body replays what was read
	body    []byte        // the request body, up to MaxBodyBytes+1 bytes
	bodyErr error         // why the body could not be read whole (e.g. it came too slowly)
	status  int
	header  http.Header
	answer  []byte
}

// check returns an error when the document does not describe the exchange: the answer's status,
// headers or body is not one the document gives for the request's operation (or, for requests
// matching none, in x-unrouted-responses), or the handler answered 2xx to a request the document
// calls invalid. It does not require a request the document calls valid to be served: one may
// still be refused (a wait over the configured maximum, a wait in both the query and the body,
// an unknown field or query parameter, which the document cannot express), as long as the
// refusal is a documented answer. Nor does it check what the document says in prose only (the
// order of events, timing, which of an operation's codes fits which situation).
func (s *apiSpec) check(ctx context.Context, x exchange) error {
	route, params, docAnswer := s.route(x.req)
	if route == nil {
		return s.checkUnrouted(ctx, x, docAnswer)
	}
	// HEAD is GET without the body (the document's rule); openapi3filter skips HEAD answers.
	vreq := x.req.Clone(ctx)
	vreq.Method = route.Method
	vreq.Body = http.NoBody
	// A body of only whitespace is none (the document's rule).
	if len(bytes.TrimSpace(x.body)) > 0 {
		vreq.Body = io.NopCloser(bytes.NewReader(x.body))
		if vreq.Header.Get("Content-Type") == "" {
			// The handler reads bodies as JSON whatever their Content-Type (the document's rule).
			vreq.Header.Set("Content-Type", "application/json")
		}
	}
	in := &openapi3filter.RequestValidationInput{Request: vreq, PathParams: params, Route: route,
		Options: checkOptions(&openapi3filter.Options{SkipSettingDefaults: true, AuthenticationFunc: openapi3filter.NoopAuthenticationFunc,
			// A body over the limit is refused whatever it holds (below); decoding it is slow.
			ExcludeRequestBody: len(x.body) > sidecarclient.MaxBodyBytes})}
	reqErr := openapi3filter.ValidateRequest(ctx, in)
	// An operation that answers 413 reads the body (the others, and HEAD, ignore it): one that
	// did not arrive whole, or is over the limit, makes the request invalid.
	if route.Operation.Responses.Status(http.StatusRequestEntityTooLarge) != nil && x.req.Method != http.MethodHead {
		switch {
		case x.bodyErr != nil:
			reqErr = fmt.Errorf("the request body did not arrive whole: %w", x.bodyErr)
		case len(x.body) > sidecarclient.MaxBodyBytes:
			reqErr = errors.New("the request body is over MaxBodyBytes")
		}
	}
	if err := s.checkAnswer(ctx, in, x, x.req.Method == http.MethodHead); err != nil {
		return fmt.Errorf("operation %s %s: %w", route.Method, route.Path, err)
	}
	if reqErr != nil && x.status < 400 {
		return fmt.Errorf("operation %s %s: the handler answered %d to a request the document calls invalid: %w",
			route.Method, route.Path, x.status, reqErr)
	}
	return nil
}

// checkUnrouted checks the answer to a request that matches no operation of the document: its
// status must be one of x-unrouted-responses with that response's headers and body, and it is 405,
// with the same Allow header, exactly when the ServeMux with the document's routes says so.
func (s *apiSpec) checkUnrouted(ctx context.Context, x exchange, docAnswer *httptest.ResponseRecorder) error {
	if (x.status == http.StatusMethodNotAllowed) != (docAnswer.Code == http.StatusMethodNotAllowed) ||
		x.header.Get("Allow") != docAnswer.Header().Get("Allow") {
		return fmt.Errorf("no operation for %s %q: the handler answered %d (Allow %q) where the document's routes give %d (Allow %q)",
			x.req.Method, x.req.URL.Path, x.status, x.header.Get("Allow"), docAnswer.Code, docAnswer.Header().Get("Allow"))
	}
	if err := s.checkUnroutedAnswer(ctx, x.req, x); err != nil {
		return fmt.Errorf("no operation for %s %q: %w", x.req.Method, x.req.URL.Path, err)
	}
	return nil
}

// checkUnroutedAnswer checks that x's answer to r is one of x-unrouted-responses. r is nil for a
// request Go's HTTP server could not parse.
func (s *apiSpec) checkUnroutedAnswer(ctx context.Context, r *http.Request, x exchange) error {
	vreq := httptest.NewRequestWithContext(ctx, http.MethodGet, "/", nil)
	if r != nil {
		vreq = r.Clone(ctx)
		vreq.Method = http.MethodGet // openapi3filter skips HEAD answers
	}
	in := &openapi3filter.RequestValidationInput{Request: vreq, Route: &routers.Route{Spec: s.doc, Operation: s.unrouted}}
	if err := s.checkAnswer(ctx, in, x, r != nil && r.Method == http.MethodHead); err != nil {
		return fmt.Errorf("%s: %w", unroutedKey, err)
	}
	return nil
}

// checkAnswer validates x's answer against the responses of in's operation: the status must be
// one of them, with its required headers and a body of its content type and schema (the answer to
// a HEAD request has no body; only its content type is checked).
func (s *apiSpec) checkAnswer(ctx context.Context, in *openapi3filter.RequestValidationInput, x exchange, head bool) error {
	err := openapi3filter.ValidateResponse(ctx, &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in, Status: x.status, Header: x.header, Body: io.NopCloser(bytes.NewReader(x.answer)),
		Options: checkOptions(&openapi3filter.Options{IncludeResponseStatus: true, ExcludeResponseBody: head}),
	})
	if err != nil {
		return err
	}
	if ref := in.Route.Operation.Responses.Status(x.status); head && len(ref.Value.Content) > 0 {
		if ct := x.header.Get("Content-Type"); ref.Value.Content.Get(ct) == nil {
			return fmt.Errorf("HEAD answer %d has Content-Type %q, not one the document gives", x.status, ct)
		}
	}
	return nil
}

// checkOptions sets o to report schema errors in one line, where and why, without the schema.
func checkOptions(o *openapi3filter.Options) *openapi3filter.Options {
	o.WithCustomSchemaErrorFunc(schemaErrorLine)
	return o
}

// schemaErrorLine is err in one line: where, why, and why the schema it came from failed.
func schemaErrorLine(err *openapi3.SchemaError) string {
	msg := fmt.Sprintf("at /%s: %s", strings.Join(err.JSONPointer(), "/"), err.Reason)
	var inner *openapi3.SchemaError
	switch {
	case errors.As(err.Origin, &inner):
		msg += " (" + schemaErrorLine(inner) + ")"
	case err.Origin != nil:
		msg += " (" + err.Origin.Error() + ")"
	}
	return msg
}

// decodeEventStream decodes a text/event-stream body for openapi3filter as a list of messages
// {"event": name, "data": the data as JSON}, dropping comments, as a client's SSE parser delivers
// them. Lines other than comments, event and data lines, and a message cut off by the end of the
// stream, are errors: the handler sends neither.
func decodeEventStream(body io.Reader, _ http.Header, _ *openapi3.SchemaRef, _ openapi3filter.EncodingFn) (any, error) {
	msgs := []any{}
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 0, 4096), sidecarclient.MaxBodyBytes)
	var (
		name    string
		data    []string
		started bool
	)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if started {
				if len(data) == 0 {
					return nil, fmt.Errorf("event %q has no data line", name)
				}
				var v any
				if err := json.Unmarshal([]byte(strings.Join(data, "\n")), &v); err != nil {
					return nil, fmt.Errorf("event %q: data is not JSON: %w", name, err)
				}
				msgs = append(msgs, map[string]any{"event": name, "data": v})
			}
			name, data, started = "", nil, false
		case strings.HasPrefix(line, ":"):
		case strings.HasPrefix(line, "event: "):
			name, started = strings.TrimPrefix(line, "event: "), true
		case strings.HasPrefix(line, "data: "):
			data, started = append(data, strings.TrimPrefix(line, "data: ")), true
		default:
			return nil, fmt.Errorf("event stream line %q is not a comment, event or data line", line)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if started {
		return nil, fmt.Errorf("event stream ends inside an event (%q)", name)
	}
	return msgs, nil
}

// validatingHandler serves requests with next and checks each request and answer against the
// API's document (apiSpec.check), reporting what the document does not describe as an error of
// tb. It sees only what reaches the handler: answers Go's HTTP server writes itself to requests
// it cannot parse are checked where a test reads them (checkUnroutedAnswer, server_test.go). It reads a request body (up to MaxBodyBytes+1 bytes) before next runs and hands next the
// same bytes, then the rest of the body or the read's error, so next reads what it would have.
type validatingHandler struct {
	tb       testing.TB
	spec     *apiSpec
	next     http.Handler
	inflight sync.WaitGroup
}

// newHandler is NewHandler for tests: the handler it returns checks every request and answer
// against the API's OpenAPI document. Every test of this package builds its handler here
// (TestTestsUseValidatedHandler), so none bypasses the check.
func newHandler(tb testing.TB, svc Service, opts ...Option) (http.Handler, error) {
	tb.Helper()
	h, err := NewHandler(svc, opts...)
	if err != nil {
		return nil, err
	}
	spec, err := loadAPISpec()
	if err != nil {
		tb.Fatal(err)
	}
	v := &validatingHandler{tb: tb, spec: spec, next: h}
	tb.Cleanup(v.wait)
	return v, nil
}

// wait waits for the requests in flight to be checked, so that none reports after the test.
func (v *validatingHandler) wait() {
	done := make(chan struct{})
	go func() { v.inflight.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		v.tb.Error("requests to the validating handler still running 10s after the test")
	}
}

func (v *validatingHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	v.inflight.Add(1)
	defer v.inflight.Done()
	x := exchange{req: r}
	if r.Body != nil && r.Body != http.NoBody {
		x.body, x.bodyErr = io.ReadAll(io.LimitReader(r.Body, sidecarclient.MaxBodyBytes+1))
		rest := io.Reader(r.Body)
		if x.bodyErr != nil {
			rest = errReader{x.bodyErr}
		}
		r.Body = readCloser{io.MultiReader(bytes.NewReader(x.body), rest), r.Body}
	}
	rec := &recordingWriter{ResponseWriter: w}
	v.next.ServeHTTP(rec, r)
	x.status, x.header, x.answer = rec.statusOr200(), rec.Header(), rec.body.Bytes()
	if err := v.spec.check(context.Background(), x); err != nil {
		v.tb.Errorf("%s does not describe this exchange: %s %s (body %.200q) answered %d %.300s:\n%v",
			apiDocPath, r.Method, r.URL.RequestURI(), x.body, x.status, bytes.TrimSpace(x.answer), err)
	}
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

type readCloser struct {
	io.Reader
	io.Closer
}

// recordingWriter passes an answer through and keeps a copy of its status and body. Flushes and
// write deadlines reach the writer below through Unwrap.
type recordingWriter struct {
	http.ResponseWriter
	status int
	body   bytes.Buffer
}

func (w *recordingWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *recordingWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	w.body.Write(b)
	return w.ResponseWriter.Write(b)
}

func (w *recordingWriter) statusOr200() int {
	if w.status == 0 {
		return http.StatusOK
	}
	return w.status
}

// Unwrap lets http.ResponseController reach the writer below.
func (w *recordingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
