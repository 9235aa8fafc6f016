package main_test

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestVersion builds the sidecar and checks that --version (and -version) prints the version and
// the commit it was built from, and exits 0 before the sidecar checks any other setting.
func TestVersion(t *testing.T) {
	head, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatalf("git rev-parse HEAD (the test builds from this checkout): %v", err)
	}
	// The commit as a release build states it (-X): this machine's go env may turn VCS stamping
	// off (GOFLAGS=-buildvcs=false), and a git worktree is not stamped anyway.
	bin := filepath.Join(t.TempDir(), "sidecar")
	ldflags := "-X github.com/baton-dev/baton/internal/version.commit=" + strings.TrimSpace(string(head))
	if out, err := exec.Command("go", "build", "-ldflags", ldflags, "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for _, flag := range []string{"--version", "-version"} {
		out, err := exec.Command(bin, flag).CombinedOutput()
		if err != nil || !strings.HasPrefix(string(out), "baton-sidecar ") || !strings.Contains(string(out), "commit "+strings.TrimSpace(string(head))) {
			t.Errorf("sidecar %s: %v, output %q; want baton-sidecar VERSION commit %s", flag, err, out, strings.TrimSpace(string(head)))
		}
	}
}
