package cli

import (
	"io"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"
)

// childGroup puts CMD in a process group of its own, so that baton can stop all of it, and has
// the kernel kill CMD if baton dies. When baton's group has the terminal, CMD's group gets it, so
// that an interactive CMD still reads from it and ^C reaches it; restore, called once CMD exited,
// gives the terminal back to baton's group (and so to a shell script that runs baton).
func childGroup(stdin io.Reader) (attr *syscall.SysProcAttr, restore func()) {
	// Pdeathsig: if baton dies (SIGKILL, OOM) nobody renews the lease, so CMD must not run on.
	attr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	f, ok := stdin.(*os.File)
	if !ok {
		return attr, func() {}
	}
	fd := int(f.Fd())
	own := unix.Getpgrp()
	if fg, err := unix.IoctlGetInt(fd, unix.TIOCGPGRP); err != nil || fg != own {
		return attr, func() {}
	}
	attr.Foreground, attr.Ctty = true, fd
	return attr, func() {
		// A background group that takes the terminal gets SIGTTOU unless it ignores it.
		signal.Ignore(syscall.SIGTTOU)
		defer signal.Reset(syscall.SIGTTOU)
		_ = unix.IoctlSetPointerInt(fd, unix.TIOCSPGRP, own)
	}
}
