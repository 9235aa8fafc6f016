package sidecarapi

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/baton-dev/baton/sidecarclient"
)

// TestAPIDocumentRoutes: the routes NewHandler registers, the routes its "no route" answers list
// (routesHelp) and the operations of the API's OpenAPI document are the same set, and the
// handler's ServeMux routes each operation's path to it. The registrations are read from this
// package's source: every call of handle, Handle or HandleFunc must name its pattern literally.
func TestAPIDocumentRoutes(t *testing.T) {
	spec, err := loadAPISpec()
	if err != nil {
		t.Fatal(err)
	}
	var documented []string
	for path, item := range spec.doc.Paths.Map() {
		for method, op := range item.Operations() {
			documented = append(documented, method+" "+path)
			if op.OperationID == "" || len(op.Tags) != 1 {
				t.Errorf("%s %s: want an operationId and one tag (docs/api/sidecar.md groups by tag)", method, path)
			}
		}
	}
	slices.Sort(documented)

	for what, routes := range map[string][]string{
		"registered by NewHandler": registeredPatterns(t),
		"listed in routesHelp":     strings.Split(routesHelp, ", "),
	} {
		if only := minus(routes, documented); len(only) > 0 {
			t.Errorf("routes %s but not in %s: %s", what, apiDocPath, strings.Join(only, ", "))
		}
		if only := minus(documented, routes); len(only) > 0 {
			t.Errorf("operations in %s but not %s: %s", apiDocPath, what, strings.Join(only, ", "))
		}
	}

	h, err := NewHandler(&fakeService{t: t})
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range documented {
		method, path, _ := strings.Cut(op, " ")
		r := httptest.NewRequest(method, pathParamRE.ReplaceAllString(path, "x"), nil)
		if _, pattern := h.(*handler).mux.Handler(r); pattern != op {
			t.Errorf("operation %s: the handler routes %s %s to %q", op, method, r.URL.Path, pattern)
		}
	}
}

// minus returns the elements of a that are not in b.
func minus(a, b []string) []string {
	var out []string
	for _, s := range a {
		if !slices.Contains(b, s) {
			out = append(out, s)
		}
	}
	return out
}

// registeredPatterns returns the patterns of the handle, Handle and HandleFunc calls in this
// package's non-test source, outside handler.handle, which registers the patterns it is given.
func registeredPatterns(t *testing.T) []string {
	t.Helper()
	var patterns []string
	forEachCall(t, false, func(file string, call *ast.CallExpr, funcName string) {
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok || (sel.Sel.Name != "handle" && sel.Sel.Name != "Handle" && sel.Sel.Name != "HandleFunc") || len(call.Args) == 0 {
			return
		}
		if funcName == "handle" {
			return // the registration helper itself, whose callers name the patterns
		}
		lit, ok := call.Args[0].(*ast.BasicLit)
		if !ok || lit.Kind != token.STRING {
			t.Errorf("%s: a route is registered with a pattern that is not a string literal; TestAPIDocumentRoutes cannot see it", file)
			return
		}
		p, err := strconv.Unquote(lit.Value)
		if err != nil {
			t.Fatal(err)
		}
		patterns = append(patterns, p)
	})
	if len(patterns) == 0 {
		t.Fatal("found no route registrations in the package source")
	}
	return patterns
}

// forEachCall parses this package's Go files, the test files when tests is true and the others
// when not, and calls fn for every call expression with the name of the function declaration it
// is in ("" at package level).
func forEachCall(t *testing.T, tests bool, fn func(file string, call *ast.CallExpr, funcName string)) {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") != tests {
			continue
		}
		f, err := parser.ParseFile(fset, file, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			name := ""
			if fd, ok := decl.(*ast.FuncDecl); ok {
				name = fd.Name.Name
			}
			ast.Inspect(decl, func(n ast.Node) bool {
				if call, ok := n.(*ast.CallExpr); ok {
					fn(file, call, name)
				}
				return true
			})
		}
	}
}

// TestTestsUseValidatedHandler: no test builds a handler except through newHandler, so that
// every request and answer of the handler's tests is checked against the API's document.
// ExampleNewHandler, which shows the call and serves nothing (its Service is nil), is the
// exception. TestAPIDocumentRoutes builds one to look at its routes, serving nothing.
func TestTestsUseValidatedHandler(t *testing.T) {
	allowed := map[string]bool{"newHandler": true, "ExampleNewHandler": true, "TestAPIDocumentRoutes": true}
	found := 0
	forEachCall(t, true, func(file string, call *ast.CallExpr, funcName string) {
		name := ""
		switch fun := call.Fun.(type) {
		case *ast.Ident:
			name = fun.Name
		case *ast.SelectorExpr:
			name = fun.Sel.Name
		}
		if name != "NewHandler" {
			return
		}
		found++
		if !allowed[funcName] {
			t.Errorf("%s: %s calls NewHandler; build handlers with newHandler, which checks their traffic against %s",
				file, funcName, apiDocPath)
		}
	})
	if found == 0 {
		t.Fatal("found no call of NewHandler in the tests: is the check looking at the right files?")
	}
}

// TestAPIDocumentCheckFails: the check that the handler's tests run on every exchange refuses
// answers and requests the document does not describe, and accepts one it does.
func TestAPIDocumentCheckFails(t *testing.T) {
	spec, err := loadAPISpec()
	if err != nil {
		t.Fatal(err)
	}
	jsonHeader := func(extra ...string) http.Header {
		h := http.Header{"Content-Type": {"application/json"}, "Cache-Control": {"no-store"}, "X-Content-Type-Options": {"nosniff"}}
		for i := 0; i+1 < len(extra); i += 2 {
			h.Set(extra[i], extra[i+1])
		}
		return h
	}
	sse := http.Header{"Content-Type": {"text/event-stream"}, "Cache-Control": {"no-store"}, "X-Content-Type-Options": {"nosniff"}}
	const event = `{"type":"acquired","lockId":"a","token":3,"time":"2026-03-01T12:00:00Z"}`
	tests := []struct {
		name, method, target, body string
		status                     int
		header                     http.Header
		answer                     string
		want                       string // substring of the error; "" for none
	}{
		{"documented", "GET", "/v1/locks/a", "", 200, jsonHeader(), `{"lockId":"a","state":"held","token":7}`, ""},
		{"undocumented field", "GET", "/v1/locks/a", "", 200, jsonHeader(), `{"lockId":"a","state":"held","owner":"x"}`, `property "owner" is unsupported`},
		{"undocumented state", "GET", "/v1/locks/a", "", 200, jsonHeader(), `{"lockId":"a","state":"busy"}`, "not one of the allowed values"},
		{"undocumented status", "GET", "/v1/locks/a", "", 418, jsonHeader(), `{"error":"short and stout","code":"internal"}`, "status is not supported"},
		{"undocumented code", "POST", "/v1/locks/a/acquire", "", 409, jsonHeader(), `{"error":"lock a is held elsewhere","code":"busy"}`, `at /code`},
		{"code of another status", "POST", "/v1/locks/a/acquire", "", 400, jsonHeader(), `{"error":"lock a is held elsewhere","code":"locked"}`, `at /code`},
		{"a 200 without a grant", "POST", "/v1/locks/a/acquire", "", 200, jsonHeader(), `{"lockId":"a","state":"waiting"}`, "not one of the allowed values"},
		{"missing header", "GET", "/v1/locks/a", "", 200, http.Header{"Content-Type": {"application/json"}}, `{"lockId":"a","state":"idle"}`, `"Cache-Control" missing`},
		{"wrong content type", "GET", "/v1/locks/a", "", 200, jsonHeader("Content-Type", "text/plain"), `{"lockId":"a","state":"idle"}`, "Content-Type"},
		{"invalid request accepted", "POST", "/v1/locks/a/release", `{"token":0}`, 200, jsonHeader(), `{"lockId":"a","state":"idle"}`, "calls invalid"},
		{"invalid request refused", "POST", "/v1/locks/a/release", `{"token":0}`, 400, jsonHeader(), `{"error":"token 0 is not a token","code":"bad_request"}`, ""},
		{"HEAD with a documented status", "HEAD", "/readyz", "", 503, jsonHeader(), "", ""},
		{"HEAD with an undocumented status", "HEAD", "/readyz", "", 404, jsonHeader(), "", "status is not supported"},
		{"unrouted 404", "GET", "/v2/locks", "", 404, jsonHeader(), `{"error":"no route for GET /v2/locks","code":"not_found"}`, ""},
		{"unrouted 200", "GET", "/v2/locks", "", 200, jsonHeader(), `{"locks":[]}`, "status is not supported"},
		{"405 without Allow", "POST", "/healthz", "", 405, jsonHeader(), `{"error":"use GET, HEAD on this path","code":"method_not_allowed"}`, `Allow ""`},
		{"405 with the wrong Allow", "POST", "/healthz", "", 405, jsonHeader("Allow", "GET"), `{"error":"use GET, HEAD on this path","code":"method_not_allowed"}`, `Allow "GET"`},
		{"event stream", "GET", "/v1/events", "", 200, sse, ": subscribed\n\nevent: acquired\ndata: " + event + "\n\n", ""},
		{"event stream, undocumented event", "GET", "/v1/events", "", 200, sse, "event: stolen\ndata: " + event + "\n\n", `at /0/event`},
		{"event stream, event cut off", "GET", "/v1/events", "", 200, sse, "event: acquired\ndata: " + event + "\n", "ends inside an event"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(tc.method, tc.target, strings.NewReader(tc.body))
			x := exchange{req: r, body: []byte(tc.body), status: tc.status, header: tc.header, answer: []byte(tc.answer)}
			err := spec.check(t.Context(), x)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("check refused a documented exchange: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("check: %v; want an error containing %q", err, tc.want)
			}
		})
	}
}

// TestAPIDocumentNumbers: the limits the document states are the ones the code sets.
func TestAPIDocumentNumbers(t *testing.T) {
	spec, err := loadAPISpec()
	if err != nil {
		t.Fatal(err)
	}
	if got := spec.doc.Components.Schemas["LockID"].Value.MaxLength; got == nil || *got != maxLockIDBytes {
		t.Errorf("LockID maxLength %v, want maxLockIDBytes %d", got, maxLockIDBytes)
	}
	raw, err := os.ReadFile(apiDocPath)
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Join(strings.Fields(string(raw)), " ")
	for what, phrase := range map[string]string{
		"DefaultReadTimeout": fmt.Sprintf("within %d s of its first byte", int(DefaultReadTimeout.Seconds())),
		"read timeout (408)": fmt.Sprintf("within the read timeout (%d s)", int(DefaultReadTimeout.Seconds())),
		"DefaultMaxConns":    fmt.Sprintf("At most %d connections", DefaultMaxConns),
		"DefaultKeepAlive":   fmt.Sprintf("`: keepalive` every %d s", int(DefaultKeepAlive.Seconds())),
		"DefaultMaxWait":     fmt.Sprintf("from `0s` to `%s`", strings.TrimSuffix(DefaultMaxWait.String(), "0s")),
		"MaxBodyBytes":       fmt.Sprintf("over %d MiB", sidecarclient.MaxBodyBytes>>20),
		"maxHeaderBytes":     fmt.Sprintf("over %d KiB", maxHeaderBytes>>10),
	} {
		if !strings.Contains(text, phrase) {
			t.Errorf("%s: %s does not say %q", what, apiDocPath, phrase)
		}
	}
}
