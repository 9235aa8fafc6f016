package gobuild

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// HeartbeatEvery is how often a silent build step says it is still running.
const HeartbeatEvery = time.Minute

// Builder runs the go command for one build and reports on it. Every
// progress line and error message starts with Prefix and a colon.
type Builder struct {
	// Prefix names the package building, e.g. "localkube".
	Prefix string
	// Progress receives the progress lines; it must not be nil.
	Progress io.Writer
	// GoBin is the path of the go command.
	GoBin string
	// Log receives every go command line and its stderr; it must not be nil.
	Log io.Writer
	// BinDir is where GoBuild puts binaries.
	BinDir string
	// Env is added to the go command's environment after the process's own
	// and after GOFLAGS and GOWORK, so it wins (e.g. CGO_ENABLED=0).
	Env []string
}

// Command is one main package to build into Builder.BinDir.
type Command struct {
	// Name is the binary's file name.
	Name string
	// Pkg is the package to build: an import path (a dependency of the
	// throwaway module with a tool directive) or a ./dir of the module.
	Pkg string
	// Version is what the progress lines call the binary's version.
	Version string
	// Expect says how long the first build takes, for the progress line.
	Expect string
	// LDFlags is passed as -ldflags unless empty.
	LDFlags string
	// Tags are passed as -tags unless empty.
	Tags []string
}

// GoBuild builds c in the module at src into BinDir/c.Name with -trimpath.
// The binary is written under a temporary name and renamed into place, so
// BinDir/c.Name is always a complete binary. A heartbeat line is printed
// every HeartbeatEvery while go build runs.
func (b *Builder) GoBuild(ctx context.Context, src string, c Command) error {
	start := time.Now()
	fmt.Fprintf(b.Progress, "%s: building %s %s (first build on 2 cores: %s; go build prints nothing, so a line each minute says it still runs)...\n", b.Prefix, c.Name, c.Version, c.Expect)
	tmp := filepath.Join(b.BinDir, c.Name+".tmp")
	args := []string{"build", "-trimpath", "-o", tmp}
	if len(c.Tags) > 0 {
		args = append(args, "-tags", strings.Join(c.Tags, ","))
	}
	if c.LDFlags != "" {
		args = append(args, "-ldflags", c.LDFlags)
	}
	stopHeartbeat := b.Heartbeat("building "+c.Name+" "+c.Version, start, HeartbeatEvery)
	_, err := b.Go(ctx, src, append(args, c.Pkg)...)
	stopHeartbeat()
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("%s: build %s %s: %w", b.Prefix, c.Name, c.Version, err)
	}
	if err := os.Rename(tmp, filepath.Join(b.BinDir, c.Name)); err != nil {
		return fmt.Errorf("%s: install %s: %w", b.Prefix, c.Name, err)
	}
	fmt.Fprintf(b.Progress, "%s: built %s %s in %s\n", b.Prefix, c.Name, c.Version, Since(start))
	return nil
}

// Heartbeat prints a line every interval until the returned function is
// called, so that a build slowed down by a busy machine is not taken for a
// hang. The returned function waits for the printing goroutine to end.
func (b *Builder) Heartbeat(what string, start time.Time, every time.Duration) (stop func()) {
	done, ended := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(ended)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				fmt.Fprintf(b.Progress, "%s: still %s (%s so far)\n", b.Prefix, what, Since(start))
			}
		}
	}()
	return func() {
		close(done)
		<-ended
	}
}

// ResolveTimeout bounds one attempt at resolving a build module's dependencies (go mod download
// and tidy). It is long enough for Kubernetes' module graph on a slow link; a stalled download
// is given up after it and tried again (see Step).
const ResolveTimeout = 10 * time.Minute

// DefaultResolveExpect is how long resolving takes, for a module not measured on its own.
const DefaultResolveExpect = "seconds with a full module cache, minutes with an empty one on a slow link"

// Resolve runs resolve, which downloads and resolves what with the go command (go mod download
// and tidy print nothing while they fetch modules), as a Step: a line when it starts and each
// minute while it runs, an attempt given up after ResolveTimeout, 3 attempts in all. expect says
// how long it takes, for the first line (DefaultResolveExpect if empty). resolve must start
// afresh each time it is called.
func (b *Builder) Resolve(ctx context.Context, what, expect string, resolve func(ctx context.Context) error) error {
	if expect == "" {
		expect = DefaultResolveExpect
	}
	err := Step{
		Prefix:   b.Prefix,
		What:     "resolving " + what,
		Expect:   "go mod download and tidy print nothing; " + expect,
		Hint:     "check that the Go module proxy (go env GOPROXY) can be reached; the build log has the go commands' output",
		Progress: b.Progress,
		Timeout:  ResolveTimeout,
	}.Run(ctx, resolve)
	if err != nil {
		return fmt.Errorf("%s: %w", b.Prefix, err)
	}
	return nil
}

// Go runs the go command in dir and returns its stdout. Its stderr goes to
// the build log and, on failure, into the error.
func (b *Builder) Go(ctx context.Context, dir string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, b.GoBin, args...)
	cmd.Dir = dir
	// -mod=mod: the throwaway modules have no vendor directory and tidy may
	// need to update go.sum; GOWORK=off: a go.work above the cache must not
	// pull these modules into a workspace.
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod -buildvcs=false", "GOWORK=off")
	cmd.Env = append(cmd.Env, b.Env...)
	cmd.WaitDelay = 10 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = io.MultiWriter(&stderr, b.Log)
	env := ""
	if len(b.Env) > 0 {
		env = strings.Join(b.Env, " ") + " "
	}
	fmt.Fprintf(b.Log, "+ (cd %s && %sgo %s)\n", dir, env, strings.Join(args, " "))
	err := cmd.Run()
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return nil, fmt.Errorf("go %s: %w", args[0], ctxErr)
		}
		return nil, fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, tail(stderr.String(), 30))
	}
	return stdout.Bytes(), nil
}

// UpstreamGoMod downloads module@version into the module cache and returns
// its go.mod. It first writes a minimal go.mod into src, so that the go
// command does not look for one in the parent directories.
func (b *Builder) UpstreamGoMod(ctx context.Context, src, module, version string) ([]byte, error) {
	if err := os.WriteFile(filepath.Join(src, "go.mod"), []byte("module baton.local/"+b.Prefix+"/download\n"), 0o644); err != nil {
		return nil, fmt.Errorf("%s: install: %w", b.Prefix, err)
	}
	out, err := b.Go(ctx, src, "mod", "download", "-json", module+"@"+version)
	if err != nil {
		return nil, fmt.Errorf("%s: download %s@%s: %w", b.Prefix, module, version, err)
	}
	var info struct{ GoMod, Error string }
	if err := json.Unmarshal(out, &info); err != nil {
		return nil, fmt.Errorf("%s: go mod download %s@%s: %w", b.Prefix, module, version, err)
	}
	if info.Error != "" || info.GoMod == "" {
		return nil, fmt.Errorf("%s: go mod download %s@%s: %s", b.Prefix, module, version, info.Error)
	}
	upstream, err := os.ReadFile(info.GoMod)
	if err != nil {
		return nil, fmt.Errorf("%s: read %s go.mod: %w", b.Prefix, module, err)
	}
	return upstream, nil
}

// WriteFiles writes files (relative path to content) under root.
func (b *Builder) WriteFiles(root string, files map[string]string) error {
	for name, content := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return fmt.Errorf("%s: install: %w", b.Prefix, err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			return fmt.Errorf("%s: install: %w", b.Prefix, err)
		}
	}
	return nil
}

// WriteStamp writes a stamp file atomically: it exists only with its full
// content.
func (b *Builder) WriteStamp(path, content string) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		return fmt.Errorf("%s: install: %w", b.Prefix, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("%s: install: %w", b.Prefix, err)
	}
	return nil
}

var goDirectiveRE = regexp.MustCompile(`(?m)^go\s+(\S+)\s*$`)

// GoDirective returns the version of goMod's go directive, or "" if it has
// none.
func GoDirective(goMod []byte) string {
	if m := goDirectiveRE.FindSubmatch(goMod); m != nil {
		return string(m[1])
	}
	return ""
}

// WriteTools appends a tool directive for each of tools (main packages of
// dependencies), so that go mod tidy covers their imports and go build can
// build them by import path.
func WriteTools(sb *strings.Builder, tools []string) {
	for _, t := range tools {
		fmt.Fprintf(sb, "\ntool %s\n", t)
	}
}

// RequireGoMod returns the go.mod of a throwaway module that requires dep at
// version, with the go version of dep's own go.mod (upstream) and a tool
// directive for each of tools. dep's own requirements decide every other
// version; its replace directives, which the go command ignores in a
// dependency, are not repeated.
func RequireGoMod(header, module string, upstream []byte, dep, version string, tools ...string) string {
	var sb strings.Builder
	sb.WriteString(header + "\n\n")
	sb.WriteString("module " + module + "\n\n")
	if v := GoDirective(upstream); v != "" {
		fmt.Fprintf(&sb, "go %s\n\n", v)
	}
	fmt.Fprintf(&sb, "require %s %s\n", dep, version)
	WriteTools(&sb, tools)
	return sb.String()
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{"..."}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}

// Since is the time since t, rounded to the second, for progress lines.
func Since(t time.Time) time.Duration { return time.Since(t).Round(time.Second) }
