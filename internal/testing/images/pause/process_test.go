package pause

// Process tests: the pause command itself, built from ./cmd, as a pod sandbox runs it.

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/testing/testenv"
)

var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "baton-pause")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "pause")
	build := exec.Command("go", "build", "-o", binary, "github.com/baton-dev/baton/hack/pause")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building the pause command: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// settle is how long a test lets a process start before signalling it: a signal that arrives
// before the process has asked for it takes its default action, as it would in a pod.
const settle = 300 * time.Millisecond

// proc is a started process.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when it has exited
	err  error         // cmd.Wait's error, once done is closed
}

// start starts cmd, lets it settle and returns it; the test fails if it cannot start. The process
// is killed when the test ends if it is still running.
func start(t *testing.T, cmd *exec.Cmd) *proc {
	t.Helper()
	p, err := tryStart(t, cmd)
	if err != nil {
		t.Fatalf("start %s: %v", cmd.Path, err)
	}
	return p
}

func tryStart(t *testing.T, cmd *exec.Cmd) (*proc, error) {
	t.Helper()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.done
	})
	time.Sleep(settle)
	return p, nil
}

// running reports whether p has not exited yet.
func (p *proc) running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// signalAndWait sends sig and waits for p to exit by itself, returning its Wait error.
func (p *proc) signalAndWait(t *testing.T, sig syscall.Signal) error {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
		return p.err
	case <-time.After(10 * time.Second):
		t.Fatalf("the process is still running 10s after %v", sig)
		return nil
	}
}

func TestProcessExitsOnSignal(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			p := start(t, exec.Command(binary))
			if !p.running() {
				t.Fatalf("pause exited by itself: %v", p.err)
			}
			if err := p.signalAndWait(t, sig); err != nil {
				t.Errorf("pause ended with %v after %v, want exit status 0", err, sig)
			}
		})
	}
}

// TestProcessReapsOrphans runs pause as PID 1 of a new PID namespace, as in a pod that shares
// its PID namespace, and orphans a process in that namespace: the kernel re-parents it to pause,
// which must reap it when it exits. The control case runs sleep as PID 1, which never reaps, to
// show that the test sees a zombie when there is one.
func TestProcessReapsOrphans(t *testing.T) {
	nsenter, err := exec.LookPath("nsenter")
	if err != nil {
		skipOutsideCI(t, "needs nsenter (util-linux) to enter the PID namespace")
	}
	for _, tc := range []struct {
		name       string
		argv       []string
		wantZombie bool
	}{
		{"pause reaps", []string{binary}, false},
		{"control: sleep does not", []string{"sleep", "1000"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(tc.argv[0], tc.argv[1:]...)
			cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID, Pdeathsig: syscall.SIGKILL}
			p, err := tryStart(t, cmd)
			if err != nil {
				skipOutsideCI(t, fmt.Sprintf("cannot start a process in a new PID namespace (needs root, CAP_SYS_ADMIN): %v", err))
			}
			init := cmd.Process.Pid

			// sh starts sleep in the namespace and exits at once: sleep is orphaned. (sleep must not
			// hold on to the output pipe, or CombinedOutput would wait for it.)
			orphan := exec.Command(nsenter, "--target", fmt.Sprint(init), "--pid", "--",
				"sh", "-c", "sleep 1 </dev/null >/dev/null 2>&1 & exit 0")
			if out, err := orphan.CombinedOutput(); err != nil {
				t.Fatalf("nsenter: %v\n%s", err, out)
			}
			testenv.WaitFor(t, "the orphan to be re-parented to PID 1", 10*time.Second, func() bool { return len(children(t, init)) > 0 })
			if tc.wantZombie {
				testenv.WaitFor(t, fmt.Sprintf("a zombie under %s", tc.argv[0]), 10*time.Second, func() bool {
					for _, st := range children(t, init) {
						if st == 'Z' {
							return true
						}
					}
					return false
				})
				return
			}
			testenv.WaitFor(t, fmt.Sprintf("pause to reap the orphan (children: %v)", children(t, init)), 10*time.Second, func() bool { return len(children(t, init)) == 0 })

			// As PID 1 of a namespace a process gets only the signals it handles: SIGTERM still ends it.
			if err := p.signalAndWait(t, syscall.SIGTERM); err != nil {
				t.Errorf("pause as PID 1 ended with %v after SIGTERM, want exit status 0", err)
			}
		})
	}
}

// skipOutsideCI skips the test with why, but fails it under CI=true, where the machine runs as
// root (the real node needs it too) and lacking a PID namespace is a broken setup.
func skipOutsideCI(t *testing.T, why string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatal(why)
	}
	t.Skip(why)
}
