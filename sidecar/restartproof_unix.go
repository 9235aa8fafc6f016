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

// restartProofFile is the name of the restart proof in the socket's directory, the pod's emptyDir.
const restartProofFile = ".baton-restart-proof"

// restartProofBytes is the length of a new restart secret.
const restartProofBytes = 32

// errProofHeld means that another live process holds the restart proof.
var errProofHeld = errors.New("sidecar: another live process in this pod holds the restart proof")

// openRestartProof returns the pod's restart secret from dir (the directory of the API socket, an
// emptyDir that outlives container restarts and that no other pod sees), creating it with fresh
// random bytes the first time. It takes an exclusive lock on the file for as long as the process
// runs (release gives it back; the kernel does when the process dies), so that a second live
// process in the pod cannot use it: the secret proves that the grant of an earlier process with
// the same proof was made in this pod, the lock that no such process is still alive
// (lock.WithZeroWaitRestart). It returns errProofHeld when a live process holds the lock.
func openRestartProof(dir string) (secret []byte, release func(), err error) {
	path := filepath.Join(dir, restartProofFile)
	if err := os.MkdirAll(dir, 0o750); err != nil {
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
