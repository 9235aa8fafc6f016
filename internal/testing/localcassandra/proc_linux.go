//go:build linux

package localcassandra

import "syscall"

// sysProcAttr: with dieWithParent the node is SIGKILLed when the thread that
// started it (so in practice the Go process) dies; otherwise it gets its own
// session so that it outlives the caller and its terminal.
func sysProcAttr(dieWithParent bool) *syscall.SysProcAttr {
	if dieWithParent {
		return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	}
	return &syscall.SysProcAttr{Setsid: true}
}
