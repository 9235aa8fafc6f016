package gobuild

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/baton-dev/baton/internal/testing/filelock"
)

// StampFile is the prefix of a stamp file's name in a tool's directory.
const StampFile = ".installed"

// Tool is one throwaway module and the binaries built from it into
// Dir/bin, with its own stamp (see the package documentation for the
// layout). Several tools may share Dir; each is built and stamped on its
// own.
type Tool struct {
	// Name names the tool's source directory, stamp and build log.
	Name string
	// Version is the version the progress lines report.
	Version string
	// Dir is the cache directory; binaries go to Dir/bin.
	Dir string
	// Stamp is the content of the stamp file of a complete build; a build
	// with another stamp is redone.
	Stamp string
	// Commands are the binaries, built one after the other in this order.
	// An empty Command.Version means Version.
	Commands []Command
	// GoMod returns the go.mod of the throwaway module in src.
	GoMod func(ctx context.Context, b *Builder, src string) (string, error)
	// LDFlags, if not nil, returns the -ldflags of every command once the
	// module in src is tidy (replacing Command.LDFlags).
	LDFlags func(ctx context.Context, b *Builder, src string) (string, error)
	// Env is added to the environment of every go command (see Builder.Env).
	Env []string
	// ResolveExpect says how long resolving the module's dependencies takes, for the progress
	// line. Default: DefaultResolveExpect.
	ResolveExpect string
}

// BinDir is the directory holding the tool's binaries.
func (t Tool) BinDir() string { return filepath.Join(t.Dir, "bin") }

// Path is the path of the tool's binary name.
func (t Tool) Path(name string) string { return filepath.Join(t.BinDir(), name) }

// StampPath is the path of the tool's stamp file.
func (t Tool) StampPath() string { return filepath.Join(t.Dir, StampFile+"-"+t.Name) }

// Installed reports whether a complete build of t is in the cache: the
// stamp matches and every binary is a regular file.
func (t Tool) Installed() bool {
	b, err := os.ReadFile(t.StampPath())
	if err != nil || string(b) != t.Stamp {
		return false
	}
	for _, c := range t.Commands {
		if fi, err := os.Stat(t.Path(c.Name)); err != nil || !fi.Mode().IsRegular() {
			return false
		}
	}
	return true
}

// describe returns what the progress lines call the tool and where it is:
// "kubectl v1.37.1" "at .../bin/kubectl" for a tool with one binary of its
// own name, "containerd v2 (containerd, ctr)" "in .../bin" otherwise.
func (t Tool) describe() (what, where string) {
	if len(t.Commands) == 1 && t.Commands[0].Name == t.Name {
		return t.Name + " " + t.Version, "at " + t.Path(t.Name)
	}
	names := make([]string, len(t.Commands))
	for i, c := range t.Commands {
		names[i] = c.Name
	}
	return fmt.Sprintf("%s %s (%s)", t.Name, t.Version, strings.Join(names, ", ")), "in " + t.BinDir()
}

// Options says who builds and how.
type Options struct {
	// Prefix starts every progress line and error, e.g. "localkube".
	Prefix string
	// Progress receives the progress lines. Default: discarded.
	Progress io.Writer
	// GoBinary is the go command. Default: "go" from PATH.
	GoBinary string
}

// Install builds t unless a complete build is in the cache, holding Dir's
// file lock while it builds, and returns t.BinDir(). Safe to call from
// several processes at once.
func Install(ctx context.Context, o Options, t Tool) (binDir string, err error) {
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	if o.GoBinary == "" {
		o.GoBinary = "go"
	}
	if len(t.Commands) == 0 {
		return "", errors.New(o.Prefix + ": install " + t.Name + ": no commands to build")
	}
	what, where := t.describe()
	if t.Installed() {
		fmt.Fprintf(o.Progress, "%s: %s already built %s (cache reused)\n", o.Prefix, what, where)
		return t.BinDir(), nil
	}
	goBin, err := exec.LookPath(o.GoBinary)
	if err != nil {
		return "", fmt.Errorf("%s: go command (%s) not found; it is needed to build %s: %w", o.Prefix, o.GoBinary, t.Name, err)
	}
	if err := os.MkdirAll(t.BinDir(), 0o755); err != nil {
		return "", fmt.Errorf("%s: install %s: %w", o.Prefix, t.Name, err)
	}
	waitStart := time.Now()
	unlock, err := filelock.Lock(ctx, filepath.Join(t.Dir, ".lock"), func() {
		fmt.Fprintf(o.Progress, "%s: another process is building in %s; waiting for it...\n", o.Prefix, t.Dir)
	})
	if err != nil {
		return "", fmt.Errorf("%s: install %s: %w", o.Prefix, t.Name, err)
	}
	defer unlock()
	if t.Installed() { // another process finished while we waited
		fmt.Fprintf(o.Progress, "%s: %s built by another process %s (waited %s)\n", o.Prefix, what, where, Since(waitStart))
		return t.BinDir(), nil
	}

	_ = os.Remove(t.StampPath())
	src := filepath.Join(t.Dir, "src", t.Name)
	if err := os.RemoveAll(src); err != nil {
		return "", fmt.Errorf("%s: install %s: %w", o.Prefix, t.Name, err)
	}
	if err := os.MkdirAll(src, 0o755); err != nil {
		return "", fmt.Errorf("%s: install %s: %w", o.Prefix, t.Name, err)
	}
	logPath := filepath.Join(t.Dir, "build-"+t.Name+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return "", fmt.Errorf("%s: install %s: %w", o.Prefix, t.Name, err)
	}
	defer logFile.Close()
	b := &Builder{Prefix: o.Prefix, Progress: o.Progress, GoBin: goBin, Log: logFile, BinDir: t.BinDir(), Env: t.Env}

	start := time.Now()
	if err := t.build(ctx, b, src); err != nil {
		return "", fmt.Errorf("%w (build log %s)", err, logPath)
	}
	fmt.Fprintf(o.Progress, "%s: %s ready %s after %s\n", o.Prefix, what, where, Since(start))
	return t.BinDir(), nil
}

func (t Tool) build(ctx context.Context, b *Builder, src string) error {
	err := b.Resolve(ctx, t.Name+" "+t.Version+"'s modules", t.ResolveExpect, func(ctx context.Context) error {
		goMod, err := t.GoMod(ctx, b, src)
		if err != nil {
			return err
		}
		if err := b.WriteFiles(src, map[string]string{"go.mod": goMod}); err != nil {
			return err
		}
		if _, err := b.Go(ctx, src, "mod", "tidy"); err != nil {
			return fmt.Errorf("%s: go mod tidy of the %s build module: %w", b.Prefix, t.Name, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	var ldflags string
	if t.LDFlags != nil {
		if ldflags, err = t.LDFlags(ctx, b, src); err != nil {
			return err
		}
	}
	for _, c := range t.Commands {
		if c.Version == "" {
			c.Version = t.Version
		}
		if t.LDFlags != nil {
			c.LDFlags = ldflags
		}
		if err := b.GoBuild(ctx, src, c); err != nil {
			return err
		}
	}
	return b.WriteStamp(t.StampPath(), t.Stamp)
}
