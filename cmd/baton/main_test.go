package main

import (
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestBinary builds the command and checks that exit codes reach the shell.
func TestBinary(t *testing.T) {
	head, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatalf("git rev-parse HEAD (the test builds from this checkout): %v", err)
	}
	// The commit as a release build states it (-X): this machine's go env may turn VCS stamping
	// off (GOFLAGS=-buildvcs=false), and a git worktree is not stamped anyway.
	bin := filepath.Join(t.TempDir(), "baton")
	ldflags := "-X github.com/baton-dev/baton/internal/version.commit=" + strings.TrimSpace(string(head))
	if out, err := exec.Command("go", "build", "-ldflags", ldflags, "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	version := "commit " + strings.TrimSpace(string(head))
	for _, tc := range []struct {
		args       []string
		code       int
		out, inErr string
	}{
		{[]string{"help"}, 0, "Usage:", ""},
		{[]string{"version"}, 0, version, ""},
		{[]string{"--version"}, 0, version, ""},
		{[]string{"frob"}, 2, "", `unknown command "frob"`},
		{[]string{"run", "--socket", "/nonexistent/baton.sock", "--", "true"}, 2, "", "no sidecar socket at /nonexistent/baton.sock"},
	} {
		cmd := exec.Command(bin, tc.args...)
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if code != tc.code || !strings.Contains(stdout.String(), tc.out) || !strings.Contains(stderr.String(), tc.inErr) {
			t.Errorf("baton %v: exit %d, stdout %q, stderr %q", tc.args, code, stdout.String(), stderr.String())
		}
	}
}
