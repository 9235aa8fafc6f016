//go:build !linux

package cli

import (
	"io"
	"syscall"
)

// childGroup puts CMD in a process group of its own, so that baton can stop all of it. (On Linux
// the kernel also kills CMD if baton dies, and an interactive CMD gets the terminal.)
func childGroup(io.Reader) (attr *syscall.SysProcAttr, restore func()) {
	return &syscall.SysProcAttr{Setpgid: true}, func() {}
}
