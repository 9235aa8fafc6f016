package imagebuild

// Supply-chain checks of the Dockerfile and its build context: every base pinned by digest, a
// builder whose Go is at least go.mod's, and a .dockerignore that keeps the build context to the
// source the BUILD line compiles.

import (
	"bufio"
	"bytes"
	"context"
	"go/version"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// pinnedRef is an image reference pinned by digest, with the tag kept for the reader:
// registry/repository:tag@sha256:<64 hex digits>.
var pinnedRef = regexp.MustCompile(`^[a-z0-9][a-z0-9._/-]*:[A-Za-z0-9._-]+@sha256:[0-9a-f]{64}$`)

func TestDockerfileBasesPinnedByDigest(t *testing.T) {
	stages := parseDockerfile(t, filepath.Join(repoRoot, "Dockerfile"))
	names := map[string]bool{}
	for _, s := range stages {
		if !names[s.from] && !pinnedRef.MatchString(s.from) {
			t.Errorf("Dockerfile: FROM %s is not pinned: write it as name:tag@sha256:<digest> (crane digest name:tag prints the digest)", s.from)
		}
		if s.name != "" {
			names[s.name] = true
		}
	}
}

func TestDockerfileBuilderGoVersion(t *testing.T) {
	stages := parseDockerfile(t, filepath.Join(repoRoot, "Dockerfile"))
	var builder string
	for _, s := range stages {
		if strings.HasPrefix(s.from, "golang:") {
			builder = s.from
		}
	}
	if builder == "" {
		t.Fatal("the Dockerfile has no golang: build stage")
	}
	tag, _, _ := strings.Cut(strings.TrimPrefix(builder, "golang:"), "@")
	goVersion, _, _ := strings.Cut(tag, "-") // 1.26.8-bookworm -> 1.26.8
	want := goDirective(t)
	// The official golang images set GOTOOLCHAIN=local: an older Go than go.mod asks for fails
	// docker build with "go.mod requires go >= ...".
	if version.Compare("go"+goVersion, "go"+want) < 0 {
		t.Errorf("the Dockerfile builds with golang:%s, older than go.mod's go %s: pin golang:%s (by digest)", tag, want, want)
	}
	if strings.Count(goVersion, ".") != 2 {
		t.Errorf("the Dockerfile's builder tag %q names no patch release: the digest pins one, the tag should say which", tag)
	}
}

// goDirective returns go.mod's go version, e.g. "1.26.8".
func goDirective(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "go "); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatal("go.mod has no go directive")
	return ""
}

// dockerignore returns the patterns of .dockerignore, cleaned as docker build cleans them. It
// fails the test on the forms its matcher (ignored) does not know: exceptions (!) and **.
func dockerignore(t *testing.T) []string {
	t.Helper()
	f, err := os.Open(filepath.Join(repoRoot, ".dockerignore"))
	if err != nil {
		t.Fatalf("%v: docker build would send the whole tree, .git and _out included, as its context", err)
	}
	defer func() { _ = f.Close() }()
	var patterns []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		p := strings.TrimSpace(sc.Text())
		if p == "" || strings.HasPrefix(p, "#") {
			continue
		}
		if strings.HasPrefix(p, "!") || strings.Contains(p, "**") {
			t.Fatalf(".dockerignore: %q: this test's matcher knows plain paths and * ? [] globs only; extend ignored first", p)
		}
		patterns = append(patterns, strings.TrimPrefix(path.Clean(p), "/"))
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return patterns
}

// ignored reports whether docker build leaves rel (slash-separated, relative to the context)
// out of the context: a pattern matches it or one of its parent directories.
func ignored(t *testing.T, patterns []string, rel string) bool {
	t.Helper()
	for p := rel; p != "." && p != "/"; p = path.Dir(p) {
		for _, pat := range patterns {
			ok, err := path.Match(pat, p)
			if err != nil {
				t.Fatalf(".dockerignore: %q: %v", pat, err)
			}
			if ok {
				return true
			}
		}
	}
	return false
}

func TestDockerignore(t *testing.T) {
	patterns := dockerignore(t)
	for _, rel := range []string{".git/HEAD", "_out/images.tar", "bin/sidecar", "docs/bench/compare.json", "sidecar.test", "cpu.prof",
		"README.md", "hack/demo/main.go", "test/e2e/node_test.go", "internal/testing/localnode/node.go",
		"internal/inject/testdata/cronjob.yaml", "lock/locker_test.go", "lock/cassandrastore/store_test.go"} {
		if !ignored(t, patterns, rel) {
			t.Errorf(".dockerignore lets %s into the build context", rel)
		}
	}
	// Everything the Dockerfile's build reads must stay: go.mod, go.sum and every file of the
	// module's packages that the BUILD line compiles.
	needed := []string{"go.mod", "go.sum"}
	abs, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range buildFiles(t.Context(), t, batonPkgs) {
		rel, err := filepath.Rel(abs, f)
		if err != nil {
			t.Fatal(err)
		}
		needed = append(needed, filepath.ToSlash(rel))
	}
	if len(needed) < 10 {
		t.Fatalf("go list found only %v: the check would prove nothing", needed)
	}
	for _, rel := range needed {
		if ignored(t, patterns, rel) {
			t.Errorf(".dockerignore leaves out %s, which the BUILD line compiles", rel)
		}
	}
}

// buildFiles lists, with go list, the source and embedded files of the main module's packages
// that building pkgs reads (GOOS=linux, CGO_ENABLED=0, as the BUILD line). Files of other
// modules come from the module cache, not the build context.
func buildFiles(ctx context.Context, t *testing.T, pkgs string) []string {
	t.Helper()
	tmpl := `{{if and .Module .Module.Main}}{{$d := .Dir}}` +
		`{{range .GoFiles}}{{$d}}/{{.}}{{"\n"}}{{end}}{{range .SFiles}}{{$d}}/{{.}}{{"\n"}}{{end}}` +
		`{{range .EmbedFiles}}{{$d}}/{{.}}{{"\n"}}{{end}}{{end}}`
	cmd := exec.CommandContext(ctx, "go", "list", "-deps", "-f", tmpl, pkgs)
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, &stderr)
	}
	return strings.Fields(string(out))
}

// TestDockerContextBuilds does what docker build does with the build stage, short of the golang
// image: it copies the build context (the working tree less what .dockerignore leaves out) to a
// fresh directory and runs the Makefile's BUILD line there. It fails when .dockerignore leaves out
// anything the build needs, whatever kind of file. Seconds with a warm build cache.
func TestDockerContextBuilds(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles the baton binaries")
	}
	patterns := dockerignore(t)
	ctxDir := t.TempDir()
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	copied := 0
	err = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil || rel == "." {
			return err
		}
		rel = filepath.ToSlash(rel)
		if ignored(t, patterns, rel) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		dst := filepath.Join(ctxDir, filepath.FromSlash(rel))
		if d.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		if !d.Type().IsRegular() {
			return nil // docker build copies symlinks too; baton's tree has none that the build needs
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		copied++
		return os.WriteFile(dst, b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	// The build arguments docker build --build-arg VERSION=... --build-arg COMMIT=... passes, as
	// the shell of the RUN line expands them.
	args := map[string]string{"VERSION": "v9.8.7-rc.1", "COMMIT": "0123456789abcdef0123456789abcdef01234567"}
	words := shellWords(t, makeBuild(t))
	for i, w := range words {
		words[i] = os.Expand(w, func(k string) string { return args[k] })
	}
	env := append(os.Environ(), "GOFLAGS=-buildvcs=false") // the context has no .git
	for len(words) > 0 && strings.Contains(words[0], "=") {
		env = append(env, words[0])
		words = words[1:]
	}
	cmd := exec.CommandContext(t.Context(), words[0], words[1:]...)
	cmd.Dir, cmd.Env = ctxDir, env
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the BUILD line in the build context (%d files) failed: %v\n%s", copied, err, out)
	}
	names, err := BatonBinaries(root)
	if err != nil {
		t.Fatal(err)
	}
	// Every binary states the version and commit it was given, though the context has no .git.
	want := args["VERSION"] + " commit " + args["COMMIT"] + " ("
	for _, n := range names {
		bin := filepath.Join(ctxDir, "bin", n)
		if _, err := os.Stat(bin); err != nil {
			t.Errorf("the build in the context made no %s: %v", n, err)
			continue
		}
		out, err := exec.CommandContext(t.Context(), bin, "--version").CombinedOutput()
		if err != nil || !strings.Contains(string(out), want) {
			t.Errorf("%s --version: %v, %q; want it to say %q", n, err, out, want)
		}
	}
}
