package demoapp

// Process test: the demoapp command in both its modes, as the image runs it.

import (
	"bytes"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/testing/fakesidecar"
	"github.com/baton-dev/baton/internal/testing/fencedstore"
)

// syncBuffer is a bytes.Buffer safe for a process's output and the test to share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// freeAddr returns a loopback address with a port that was free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

// startCommand runs the demoapp binary with args and env, and stops it with SIGTERM when the test
// ends, failing the test unless it then exits 0.
func startCommand(t *testing.T, bin string, env []string, args ...string) *syncBuffer {
	t.Helper()
	out := &syncBuffer{}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("demoapp %v ended with %v after SIGTERM, want exit status 0; output:\n%s", args, err, out)
			}
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
			t.Errorf("demoapp %v still running 10s after SIGTERM", args)
		}
	})
	return out
}

// getJSON GETs url into v, reporting whether it answered 200.
func getJSON(url string, v any) bool {
	resp, err := http.Get(url)
	if err != nil {
		return false
	}
	defer func() { _ = resp.Body.Close() }()
	return resp.StatusCode == http.StatusOK && json.NewDecoder(resp.Body).Decode(v) == nil
}

func TestCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the command")
	}
	bin := filepath.Join(t.TempDir(), "demoapp")
	build := exec.Command("go", "build", "-o", bin, "github.com/baton-dev/baton/hack/demoapp")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}

	storeAddr, appAddr := freeAddr(t), freeAddr(t)
	startCommand(t, bin, []string{"LISTEN_ADDR=" + storeAddr}, "serve-fenced")
	sidecar := &fakesidecar.Service{T: t}
	sidecar.SetLocks(held)
	socket := fakesidecar.Serve(t, sidecar)
	appOut := startCommand(t, bin, []string{
		"LISTEN_ADDR=" + appAddr, "POD_NAME=demo-0", "BATON_SOCKET=" + socket,
		"FENCED_URL=http://" + storeAddr + "/v1/resources/demo", "WRITE_INTERVAL=20ms",
	})

	var st Status
	waitFor(t, func() bool { return getJSON("http://"+appAddr+"/", &st) && st.Writes.Accepted >= 2 }, "the app to answer GET / with 2 accepted writes")
	if st.Pod != "demo-0" || st.Token != 42 || st.State != "held" {
		t.Errorf("GET /: %+v, want pod demo-0 holding token 42", st)
	}
	var res fencedstore.Resource
	if !getJSON("http://"+storeAddr+"/v1/resources/demo", &res) || res.Accepted < 2 || res.HighestWriter != "demo-0" || res.Highest != 42 {
		t.Errorf("the fenced store saw %+v, want writes of demo-0 with token 42", res)
	}
	if !strings.Contains(appOut.String(), `"msg":"writing with a new fencing token"`) {
		t.Errorf("the app did not log its token; output:\n%s", appOut)
	}

	bad := exec.Command(bin, "serve-nothing")
	if out, err := bad.CombinedOutput(); err == nil || !strings.Contains(string(out), "usage: demoapp") {
		t.Errorf("demoapp serve-nothing: %v\n%s\nwant usage and exit status 2", err, out)
	}
}
