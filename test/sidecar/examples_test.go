package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/testing/fencedstore"
	"github.com/baton-dev/baton/internal/testing/testenv"
	"github.com/baton-dev/baton/sidecarclient"
)

// exampleResult is the JSON line each program in examples/ prints.
type exampleResult struct {
	Lock          string `json:"lock"`
	Token         int64  `json:"token"`
	Written       bool   `json:"written"`
	StaleAccepted bool   `json:"staleAccepted"`
}

// TestExamplesFenceTheirWrites runs the programs in examples/ (Python writing to SQLite, Node and
// Go writing to an HTTP fenced resource) one after another against a real Try-mode sidecar on a
// real Cassandra. Each follows the event stream, acquires, writes with its token, sees a write with
// an older token rejected by the resource, and releases; tokens grow from one program to the next
// (issue 13, item 6).
func TestExamplesFenceTheirWrites(t *testing.T) {
	python, node := lookTool(t, "python3"), lookTool(t, "node")
	dir := t.TempDir()
	goExample := filepath.Join(dir, "go-example")
	if out, err := exec.Command("go", "build", "-o", goExample, "../../examples/go").CombinedOutput(); err != nil {
		t.Fatalf("go build ./examples/go: %v\n%s", err, out)
	}
	store, err := fencedstore.New()
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(store)
	defer srv.Close()
	db := filepath.Join(dir, "fenced.db")

	sc := startSidecar(t, fmt.Sprintf("examples-%d", time.Now().UnixNano()), "app", "BATON_MODE=Try")
	var last int64
	for _, ex := range []struct {
		name     string
		cmd      []string
		resource string // the fenced HTTP resource it writes to; "" for SQLite
	}{
		{"python", []string{python, "../../examples/python/fenced_sqlite.py"}, ""},
		{"node", []string{node, "../../examples/node/fenced_http.js"}, "node"},
		{"go", []string{goExample}, "go"},
	} {
		cmd := exec.Command(ex.cmd[0], ex.cmd[1:]...)
		cmd.Env = append(os.Environ(), "BATON_SOCKET="+sc.socket, "BATON_LOCKS=orders", "EXAMPLE_WAIT=10s", "EXAMPLE_DB="+db)
		if ex.resource != "" {
			cmd.Env = append(cmd.Env, "EXAMPLE_RESOURCE_URL="+srv.URL+"/v1/resources/"+ex.resource+"/writes")
		}
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s example: %v\n%s", ex.name, err, stderr.String())
		}
		var res exampleResult
		if err := json.Unmarshal(out, &res); err != nil {
			t.Fatalf("%s example printed %q: %v", ex.name, out, err)
		}
		t.Logf("%s example: %+v", ex.name, res)
		if res.Lock != "orders" || !res.Written || res.StaleAccepted || res.Token <= last {
			t.Errorf("%s example: %+v; want orders written with a token above %d and the stale write rejected", ex.name, res, last)
		}
		last = res.Token
		if st, err := sc.client.Lock(context.Background(), "orders"); err != nil || st.State == sidecarclient.StateHeld {
			t.Errorf("after the %s example: %+v, %v; want the lock released", ex.name, st, err)
		}
		if ex.resource == "" {
			// What the database holds, read with Python's own sqlite3.
			got, err := exec.Command(python, "-c", "import sqlite3,sys; print(*sqlite3.connect(sys.argv[1]).execute('SELECT fence, value FROM resource').fetchone(), sep='|')", db).Output()
			if want := fmt.Sprintf("%d|written by python with token %d", res.Token, res.Token); err != nil || strings.TrimSpace(string(got)) != want {
				t.Errorf("SQLite after the python example: %q, %v; want %q", got, err, want)
			}
			continue
		}
		if r := store.Resource(ex.resource); r.Highest != res.Token || r.Accepted != 1 || r.Rejected != 1 {
			t.Errorf("resource %s after the %s example: highest %d, %d accepted, %d rejected; want %d, 1, 1", ex.resource, ex.name, r.Highest, r.Accepted, r.Rejected, res.Token)
		}
	}
}

// lookTool finds a program the examples need; in CI a missing one fails the test.
func lookTool(t *testing.T, name string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		if testenv.InCI() {
			t.Fatalf("%s is needed to run its example: %v", name, err)
		}
		t.Skipf("%s not found (%v): install it to run its example", name, err)
	}
	return path
}
