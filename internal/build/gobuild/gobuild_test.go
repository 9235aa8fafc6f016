package gobuild

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// lines is a progress writer that hands each write to the test, dropping writes nobody takes.
type lines chan string

func (l lines) Write(p []byte) (int, error) {
	select {
	case l <- string(p):
	default:
	}
	return len(p), nil
}

func TestHeartbeat(t *testing.T) {
	out := make(lines, 1)
	b := &Builder{Prefix: "localkube", Progress: out}
	stop := b.Heartbeat("building kube-apiserver v1.37.1", time.Now(), time.Millisecond)
	select {
	case line := <-out:
		if want := "localkube: still building kube-apiserver v1.37.1 ("; !strings.HasPrefix(line, want) {
			t.Errorf("heartbeat line %q, want it to start with %q", line, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no heartbeat line within 10s")
	}
	stop() // returns once the printing goroutine has ended
	select {
	case <-out: // written before stop took effect
	default:
	}
	select {
	case line := <-out:
		t.Errorf("heartbeat printed %q after stop", line)
	default:
	}
}

func TestRequireGoMod(t *testing.T) {
	got := RequireGoMod("// header", "baton.local/x/y", []byte("module example.com/dep\n\ngo 1.26.6\n\nrequire a.b/c v1.0.0\n"),
		"example.com/dep", "v2.4.2", "example.com/dep/cmd/a", "example.com/dep/cmd/b")
	want := "// header\n\nmodule baton.local/x/y\n\ngo 1.26.6\n\nrequire example.com/dep v2.4.2\n\ntool example.com/dep/cmd/a\n\ntool example.com/dep/cmd/b\n"
	if got != want {
		t.Errorf("RequireGoMod =\n%s\nwant\n%s", got, want)
	}
	if got := RequireGoMod("// h", "m", []byte("module dep\n"), "dep", "v1.0.0"); strings.Contains(got, "\ngo ") {
		t.Errorf("RequireGoMod without an upstream go directive wrote one:\n%s", got)
	}
}

func TestToolInstalled(t *testing.T) {
	dir := t.TempDir()
	tool := Tool{Name: "pair", Version: "v1", Dir: dir, Stamp: "pair=v1 recipe=1\n",
		Commands: []Command{{Name: "a"}, {Name: "b"}}}
	if tool.Installed() {
		t.Fatal("Installed on an empty directory")
	}
	if err := os.MkdirAll(tool.BinDir(), 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(path, content string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write(tool.Path("a"), "")
	write(tool.StampPath(), tool.Stamp)
	if tool.Installed() {
		t.Error("Installed with binary b missing")
	}
	write(tool.Path("b"), "")
	if !tool.Installed() {
		t.Error("not Installed with both binaries and the stamp")
	}
	if want := filepath.Join(dir, ".installed-pair"); tool.StampPath() != want {
		t.Errorf("StampPath = %s, want %s", tool.StampPath(), want)
	}
	tool.Stamp = "pair=v1 recipe=2\n"
	if tool.Installed() {
		t.Error("Installed with a stamp from another recipe")
	}
}

// TestInstallCacheHit: a complete build is reused without the go command.
func TestInstallCacheHit(t *testing.T) {
	dir := t.TempDir()
	tool := Tool{Name: "one", Version: "v1", Dir: dir, Stamp: "one=v1\n", Commands: []Command{{Name: "one"}}}
	if err := os.MkdirAll(tool.BinDir(), 0o755); err != nil {
		t.Fatal(err)
	}
	for path, content := range map[string]string{tool.Path("one"): "", tool.StampPath(): tool.Stamp} {
		if err := os.WriteFile(path, []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	var progress strings.Builder
	binDir, err := Install(context.Background(), Options{Prefix: "test", Progress: &progress, GoBinary: "no-such-go-command"}, tool)
	if err != nil || binDir != tool.BinDir() {
		t.Fatalf("Install = %q, %v; want %q, nil", binDir, err, tool.BinDir())
	}
	if want := "test: one v1 already built at " + tool.Path("one") + " (cache reused)\n"; progress.String() != want {
		t.Errorf("progress %q, want %q", progress.String(), want)
	}
	tool.Stamp = "one=v2\n"
	if _, err := Install(context.Background(), Options{Prefix: "test", GoBinary: "no-such-go-command"}, tool); err == nil || !strings.Contains(err.Error(), "test: go command (no-such-go-command) not found") {
		t.Errorf("Install of a stale build without go = %v, want a go-not-found error", err)
	}
}
