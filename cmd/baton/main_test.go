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
	bin := filepath.Join(t.TempDir(), "baton")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for _, tc := range []struct {
		args       []string
		code       int
		out, inErr string
	}{
		{[]string{"help"}, 0, "Usage:", ""},
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
