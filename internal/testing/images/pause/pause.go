package pause

import (
	"errors"
	"os"
	"os/signal"
	"syscall"
)

// Notify relays the signals Run acts on (SIGCHLD, SIGINT, SIGTERM) to c, with signal.Notify.
func Notify(c chan<- os.Signal) {
	signal.Notify(c, syscall.SIGCHLD, syscall.SIGINT, syscall.SIGTERM)
}

// Run waits for signals on sigs: at each SIGCHLD it calls reap, at SIGINT or SIGTERM it returns
// that signal, and it returns nil when sigs is closed. It calls reap once before it waits, for
// children that exited before the signal handler was installed.
func Run(sigs <-chan os.Signal, reap func()) os.Signal {
	reap()
	for sig := range sigs {
		switch sig {
		case syscall.SIGINT, syscall.SIGTERM:
			return sig
		case syscall.SIGCHLD:
			reap()
		}
	}
	return nil
}

// Reap collects every child of the process that has exited, without blocking, and returns how
// many it collected. Signals coalesce, so one SIGCHLD can stand for several exited children.
func Reap() int {
	n := 0
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil || pid <= 0 { // ECHILD: no children; 0: none has exited
			return n
		}
		n++
	}
}
