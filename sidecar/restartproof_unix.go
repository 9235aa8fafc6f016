//go:build unix

package sidecar

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
)

// restartProofPath returns where the restart proof of the sidecar serving socket lives: beside the
// socket, in the pod's emptyDir ("/var/run/baton/.baton.sock.restart-proof"). One file per socket,
// so that sidecars run as processes side by side in one directory (tests, chaos runs) each have
// their own.
func restartProofPath(socket string) string {
	return filepath.Join(filepath.Dir(socket), "."+filepath.Base(socket)+".restart-proof")
}

// restartProofBytes is the length of a new restart secret.
const restartProofBytes = 32

// errProofHeld means that another live process holds the restart proof.
var errProofHeld = errors.New("sidecar: another live process in this pod holds the restart proof")

// openRestartProof returns the restart secret of the sidecar serving socket (kept beside it in the
// pod's emptyDir, which outlives container restarts and no other pod sees), creating it with fresh
// random bytes the first time. It takes an exclusive lock on the file for as long as the process
// runs (release gives it back; the kernel does when the process dies), so that a second live
// process in the pod cannot use it: the secret proves that the grant of an earlier process with
// the same proof was made in this pod, the lock that no such process is still alive
// (lock.WithZeroWaitRestart). It returns errProofHeld when a live process holds the lock.
func openRestartProof(socket string) (secret []byte, release func(), err error) {
	path := restartProofPath(socket)
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, nil, fmt.Errorf("sidecar: restart proof: %w", err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, nil, fmt.Errorf("sidecar: opening the restart proof: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, nil, fmt.Errorf("%w (%s)", errProofHeld, path)
		}
		return nil, nil, fmt.Errorf("sidecar: locking the restart proof %s: %w", path, err)
	}
	release = func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		_ = f.Close()
	}
	secret, err = io.ReadAll(io.LimitReader(f, 2*restartProofBytes))
	if err == nil && len(secret) < restartProofBytes {
		// New, or cut short by a crash while it was written: a fresh secret. Nothing proves the
		// old one any more, so an earlier process's grant waits out its lease like anybody's.
		secret = make([]byte, restartProofBytes)
		_, _ = rand.Read(secret) // never fails (crypto/rand)
		err = writeAll(f, secret)
	}
	if err != nil {
		release()
		return nil, nil, fmt.Errorf("sidecar: restart proof %s: %w", path, err)
	}
	return secret, release, nil
}

// writeAll replaces f's contents with b and syncs them.
func writeAll(f *os.File, b []byte) error {
	if err := f.Truncate(0); err != nil {
		return err
	}
	if _, err := f.WriteAt(b, 0); err != nil {
		return err
	}
	return f.Sync()
}
