package main_test

import (
	"errors"
	"os/exec"
	"testing"
	"time"
)

func TestPreStop(t *testing.T) {
	start := time.Now()
	if out, err := exec.Command(binary, "pre-stop", "--wait=300ms").CombinedOutput(); err != nil {
		t.Fatalf("pre-stop: %v\n%s", err, out)
	}
	if took := time.Since(start); took < 300*time.Millisecond {
		t.Fatalf("pre-stop returned after %v, before its wait", took)
	}
	for _, args := range [][]string{{"pre-stop", "--wait=1h"}, {"pre-stop", "--wait=soon"}, {"pre-stop", "--wait=-1s"}} {
		err := exec.Command(binary, args...).Run()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 2 {
			t.Errorf("%v: %v, want exit code 2", args, err)
		}
	}
}
