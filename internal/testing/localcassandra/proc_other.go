//go:build !linux

package localcassandra

import "syscall"

// sysProcAttr: Pdeathsig exists only on Linux; elsewhere DieWithParent only
// puts the node in its own process group.
func sysProcAttr(dieWithParent bool) *syscall.SysProcAttr {
	if dieWithParent {
		return &syscall.SysProcAttr{Setpgid: true}
	}
	return &syscall.SysProcAttr{Setsid: true}
}
