// Command vulncheck runs govulncheck for make check, and says plainly what to do with its answer:
//
//	go run ./hack/vulncheck [-db URL] [-strict] [-tool module/cmd@version] [-cache dir] [packages]
//
// It first checks that the vulnerability database at -db (default https://vuln.go.dev; make
// check passes $GOVULNDB) can be reached: for an http(s) URL, a GET of index/db.json.gz within
// 10 s; for a file:// URL, that index/modules.json exists. When it cannot, it prints a notice
// saying so and how to point it at a mirror, and exits 0: a machine without access to the
// database (like this project's CI, which reaches package registries only) still passes make
// check. With -strict (make check VULNCHECK_STRICT=1) that is a failure instead, for a release
// build that must not ship unchecked.
//
// Then it installs -tool (govulncheck at the Makefile's version) with go install from the module
// proxy into <cache>/tools/<module@version>/ unless it is there already, and runs it on the
// packages with -db. Not through go run, which turns govulncheck's exit status 3 ("vulnerable
// code is called") into 1. On status 3 vulncheck adds how to update the module (or the Go
// toolchain) and exits 1; any other failure exits 1 too.
//
// What it does not do: decide which findings matter (every finding govulncheck reports as
// called fails the check), cache the database, or check that a reachable database is current.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// DefaultDB is govulncheck's own default database.
const DefaultDB = "https://vuln.go.dev"

// DefaultTool is the govulncheck the Makefile pins (GOVULNCHECK_VERSION).
const DefaultTool = "golang.org/x/vuln/cmd/govulncheck@v1.9.0"

// probeTimeout bounds the reachability check of an http(s) database.
const probeTimeout = 10 * time.Second

// govulncheckFound is govulncheck's exit status when called code is vulnerable.
const govulncheckFound = 3

// errUnreachable is wrapped by probe when the database cannot be read.
var errUnreachable = errors.New("cannot reach the vulnerability database")

func main() {
	db := flag.String("db", DefaultDB, "vulnerability database URL (https://... or file:///...), as govulncheck's -db")
	strict := flag.Bool("strict", false, "fail, rather than skip with a notice, when the database cannot be reached")
	tool := flag.String("tool", DefaultTool, "govulncheck to install and run, as module/cmd@version")
	cache := flag.String("cache", defaultCache(), "directory to install the tool into (under tools/)")
	flag.Parse()
	pkgs := flag.Args()
	if len(pkgs) == 0 {
		pkgs = []string{"./..."}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Stdout, *db, *strict, *tool, *cache, pkgs)
	stop()
	os.Exit(code)
}

// run is vulncheck: it probes db, installs tool and scans pkgs with it, and returns vulncheck's
// exit status, writing its own messages and govulncheck's output to w.
func run(ctx context.Context, w io.Writer, db string, strict bool, tool, cache string, pkgs []string) int {
	if db == "" {
		db = DefaultDB
	}
	if code, ok := reachable(ctx, w, db, strict); !ok {
		return code
	}
	bin, err := install(ctx, w, tool, cache)
	if err != nil {
		fmt.Fprintf(w, "vulncheck: FAILED: %v\n", err)
		return 1
	}
	return scan(ctx, w, db, append([]string{bin, "-db", db}, pkgs...))
}

// reachable probes db. When it cannot be read it reports so on w and returns false with the exit
// status: 0, or 1 when strict.
func reachable(ctx context.Context, w io.Writer, db string, strict bool) (int, bool) {
	err := probe(ctx, db)
	if err == nil {
		return 0, true
	}
	verdict := "skipped"
	if strict {
		verdict = "FAILED"
	}
	fmt.Fprintf(w, "vulncheck: %s: %v.\n", verdict, err)
	fmt.Fprintf(w, "vulncheck: point GOVULNDB at a copy you can reach (make check GOVULNDB=https://<mirror> or GOVULNDB=file:///<dir>)")
	if strict {
		fmt.Fprintln(w, ", or leave VULNCHECK_STRICT unset to skip the check on such a machine.")
		return 1, false
	}
	fmt.Fprintln(w, "; VULNCHECK_STRICT=1 makes this a failure.")
	return 0, false
}

// scan runs argv, a govulncheck command line, with its output to w, and returns vulncheck's exit
// status for its exit status.
func scan(ctx context.Context, w io.Writer, db string, argv []string) int {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = w, w
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		fmt.Fprintf(w, "vulncheck: no known vulnerability in code baton calls (database %s)\n", db)
		return 0
	case errors.As(err, &exit) && exit.ExitCode() == govulncheckFound:
		fmt.Fprintln(w, "vulncheck: FAILED: govulncheck found known vulnerabilities in code that baton calls (above).")
		fmt.Fprintln(w, "vulncheck: for each, update the module it names to its \"Fixed in\" version:")
		fmt.Fprintln(w, "vulncheck:   go get <module>@<fixed version> && go mod tidy, then make check again.")
		fmt.Fprintln(w, "vulncheck: a \"Fixed in\" of the form go1.x.y (module stdlib or toolchain) means a newer Go: raise go.mod's")
		fmt.Fprintln(w, "vulncheck:   go line and the Dockerfile's golang builder image (pinned by digest) together.")
		return 1
	default:
		fmt.Fprintf(w, "vulncheck: FAILED: %s: %v\n", strings.Join(argv, " "), err)
		return 1
	}
}

// install returns the path of tool (module/cmd@version) under cache/tools/<tool>/, running go
// install with GOBIN there when it is missing. It does not check that a binary already there is
// the one the version names.
func install(ctx context.Context, w io.Writer, tool, cache string) (string, error) {
	pkg, version, ok := strings.Cut(tool, "@")
	if !ok || version == "" || cache == "" {
		return "", fmt.Errorf("install %q into %q: want module/cmd@version and a cache directory", tool, cache)
	}
	dir := filepath.Join(cache, "tools", path.Base(pkg)+"@"+version)
	bin := filepath.Join(dir, path.Base(pkg))
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	fmt.Fprintf(w, "vulncheck: installing %s into %s (go install, once)\n", tool, dir)
	cmd := exec.CommandContext(ctx, "go", "install", tool)
	cmd.Env = append(os.Environ(), "GOBIN="+dir)
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go install %s: %w", tool, err)
	}
	return bin, nil
}

// defaultCache is the Makefile's CACHE_DIR: $XDG_CACHE_HOME/baton, or ~/.cache/baton.
func defaultCache() string {
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "baton")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return ""
	}
	return filepath.Join(home, ".cache", "baton")
}

// probe returns nil when the database at db can be read, and an error wrapping errUnreachable
// that says why not. A reachable database is not checked for being a valid or current one.
func probe(ctx context.Context, db string) error {
	u, err := url.Parse(strings.TrimRight(db, "/"))
	if err != nil {
		return fmt.Errorf("%w %s: %w", errUnreachable, db, err)
	}
	switch u.Scheme {
	case "http", "https":
		return probeHTTP(ctx, u)
	case "file":
		return probeDir(u)
	default:
		return fmt.Errorf("%w %s: scheme %q (want https:// or file://)", errUnreachable, db, u.Scheme)
	}
}

// probeHTTP fetches the database's index/db.json.gz, within probeTimeout.
func probeHTTP(ctx context.Context, u *url.URL) error {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	index := u.String() + "/index/db.json.gz"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, index, nil)
	if err != nil {
		return fmt.Errorf("%w %s: %w", errUnreachable, u, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("%w %s: %w", errUnreachable, u, err)
	}
	defer func() { _ = resp.Body.Close() }()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%w %s: GET %s: %s", errUnreachable, u, index, resp.Status)
	}
	return nil
}

// probeDir checks that a file:// database has index/modules.json, which govulncheck needs.
func probeDir(u *url.URL) error {
	dir := filepath.FromSlash(u.Path)
	if _, err := os.Stat(filepath.Join(dir, "index", "modules.json")); err != nil {
		return fmt.Errorf("%w %s: %w", errUnreachable, u, err)
	}
	return nil
}
