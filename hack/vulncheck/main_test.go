package main

import (
	"bytes"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// closedURL returns the URL of an http server that is no longer listening: connection refused.
func closedURL(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(nil)
	u := srv.URL
	srv.Close()
	return u
}

func TestUnreachableDatabase(t *testing.T) {
	for _, tc := range []struct {
		name   string
		db     string
		strict bool
		want   int
	}{
		{"http skipped", closedURL(t), false, 0},
		{"http strict", closedURL(t), true, 1},
		{"file skipped", "file://" + t.TempDir(), false, 0},
		{"file strict", "file://" + t.TempDir(), true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			// Neither installed nor run: the tool cannot be installed.
			got := run(t.Context(), &out, tc.db, tc.strict, "example.invalid/cmd/none@v0.0.0", t.TempDir(), []string{"./..."})
			if got != tc.want {
				t.Errorf("exit %d, want %d; output:\n%s", got, tc.want, &out)
			}
			verdict := "vulncheck: skipped: cannot reach the vulnerability database " + tc.db
			if tc.strict {
				verdict = "vulncheck: FAILED: cannot reach the vulnerability database " + tc.db
			}
			for _, want := range []string{verdict, "GOVULNDB="} {
				if !strings.Contains(out.String(), want) {
					t.Errorf("output does not say %q:\n%s", want, &out)
				}
			}
			if strings.Contains(out.String(), "install") {
				t.Errorf("vulncheck went on to install govulncheck for an unreachable database:\n%s", &out)
			}
		})
	}
}

func TestCommandStatus(t *testing.T) {
	db := writeDB(t, nil)
	for _, tc := range []struct {
		script string
		want   int
		says   string
	}{
		{"exit 0", 0, "vulncheck: no known vulnerability"},
		{"exit 3", 1, "go get <module>@<fixed version>"},
		{"exit 1", 1, "vulncheck: FAILED: sh -c exit 1: exit status 1"},
	} {
		var out bytes.Buffer
		if got := scan(t.Context(), &out, db, []string{"sh", "-c", tc.script}); got != tc.want || !strings.Contains(out.String(), tc.says) {
			t.Errorf("%s: exit %d, want %d saying %q; output:\n%s", tc.script, got, tc.want, tc.says, &out)
		}
	}
}

// TestFindsVulnerableDependency runs the real govulncheck (the Makefile's version) through
// vulncheck against a local database with one made-up entry: go-logr/logr before v1.99.0 is
// vulnerable in Logger.Info, which lock/hintudp calls. make check must fail and say how to update.
func TestFindsVulnerableDependency(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs govulncheck")
	}
	db := writeDB(t, []byte(`{"schema_version":"1.3.1","id":"GO-TEST-0001","modified":"2026-01-01T00:00:00Z",`+
		`"published":"2026-01-01T00:00:00Z","details":"A made-up vulnerability for vulncheck's test.",`+
		`"affected":[{"package":{"name":"github.com/go-logr/logr","ecosystem":"Go"},`+
		`"ranges":[{"type":"SEMVER","events":[{"introduced":"0"},{"fixed":"1.99.0"}]}],`+
		`"ecosystem_specific":{"imports":[{"path":"github.com/go-logr/logr","symbols":["Logger.Info"]}]}}],`+
		`"database_specific":{"url":"https://pkg.go.dev/vuln/GO-TEST-0001"}}`)) // govulncheck v1.9.0 panics without the url
	tool := "golang.org/x/vuln/cmd/govulncheck@" + makeVar(t, "GOVULNCHECK_VERSION")
	if tool != DefaultTool {
		t.Errorf("DefaultTool is %s, the Makefile's %s", DefaultTool, tool)
	}
	cache := t.TempDir()

	var out bytes.Buffer
	if got := run(t.Context(), &out, db, true, tool, cache, []string{"../../lock/hintudp/"}); got != 1 {
		t.Fatalf("exit %d, want 1; output:\n%s", got, &out)
	}
	for _, want := range []string{"vulncheck: installing " + tool, "GO-TEST-0001", "Fixed in: github.com/go-logr/logr@v1.99.0",
		"vulncheck: FAILED: govulncheck found", "go get <module>@<fixed version>"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output does not say %q:\n%s", want, &out)
		}
	}

	out.Reset()
	if got := run(t.Context(), &out, db, true, tool, cache, []string{"../../hack/pause/"}); got != 0 {
		t.Errorf("a package without logr: exit %d, want 0; output:\n%s", got, &out)
	}
	if strings.Contains(out.String(), "installing") {
		t.Errorf("installed govulncheck twice:\n%s", &out)
	}
}

// writeDB writes a govulncheck database (the v1 layout of vuln.go.dev) holding entry, an OSV
// record for one module, or none, and returns its file:// URL.
func writeDB(t *testing.T, entry []byte) string {
	t.Helper()
	dir := t.TempDir()
	modules := "[]"
	if entry != nil {
		modules = `[{"path":"github.com/go-logr/logr","vulns":[{"id":"GO-TEST-0001","modified":"2026-01-01T00:00:00Z","fixed":"1.99.0"}]}]`
		write(t, filepath.Join(dir, "ID", "GO-TEST-0001.json"), entry)
	}
	write(t, filepath.Join(dir, "index", "db.json"), []byte(`{"modified":"2026-01-01T00:00:00Z"}`))
	write(t, filepath.Join(dir, "index", "modules.json"), []byte(modules))
	return "file://" + dir
}

func write(t *testing.T, name string, b []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(name, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// makeVar returns the value of a "NAME ?= value" line of the Makefile.
func makeVar(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, name+" "); ok {
			if _, v, ok := strings.Cut(rest, "?="); ok {
				return strings.TrimSpace(v)
			}
		}
	}
	t.Fatalf("the Makefile has no %s ?= line", name)
	return ""
}
