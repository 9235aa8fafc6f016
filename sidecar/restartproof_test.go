//go:build unix

package sidecar

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestRestartProof: the first sidecar of a pod creates the restart secret in the socket's
// directory; while it runs no other process can use it; a restart reads the same secret; a pod
// with another directory (no shared volume) has another secret.
func TestRestartProof(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "baton.sock")
	first, release, err := openRestartProof(socket)
	if err != nil {
		t.Fatal(err)
	}
	if len(first) != restartProofBytes {
		t.Fatalf("secret of %d bytes, want %d", len(first), restartProofBytes)
	}
	if info, err := os.Stat(restartProofPath(socket)); err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("restart proof file: %v, %v; want mode 0600", info, err)
	}
	if _, _, err := openRestartProof(socket); !errors.Is(err, errProofHeld) {
		t.Fatalf("a second live process opened the restart proof: %v; want errProofHeld", err)
	}
	release() // the process exits (the kernel drops its lock the same way when it is killed)
	again, release, err := openRestartProof(socket)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	if !bytes.Equal(again, first) {
		t.Fatal("a restart read another secret: it could not take over its predecessor's grant")
	}
	// Another pod (another volume), or another sidecar process serving another socket beside ours.
	for _, elsewhere := range []string{filepath.Join(t.TempDir(), "baton.sock"), filepath.Join(filepath.Dir(socket), "other.sock")} {
		other, releaseOther, err := openRestartProof(elsewhere)
		if err != nil {
			t.Fatal(err)
		}
		defer releaseOther()
		if bytes.Equal(other, first) {
			t.Fatalf("the sidecar of %s shares a restart secret with the one of %s", elsewhere, socket)
		}
	}
	// A file cut short (a crash while it was first written) gets a fresh secret.
	short := filepath.Join(t.TempDir(), "baton.sock")
	if err := os.WriteFile(restartProofPath(short), []byte("abc"), 0o600); err != nil {
		t.Fatal(err)
	}
	fresh, releaseFresh, err := openRestartProof(short)
	if err != nil {
		t.Fatal(err)
	}
	defer releaseFresh()
	if len(fresh) != restartProofBytes {
		t.Fatalf("secret of %d bytes after a short file, want %d", len(fresh), restartProofBytes)
	}
}
