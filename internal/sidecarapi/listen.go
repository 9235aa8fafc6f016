package sidecarapi

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
)

// socketMode lets the sidecar and the app (same group via fsGroup) connect, and nobody else.
const socketMode fs.FileMode = 0o660

// ListenUnix listens on the unix socket socketPath with mode 0660, creating its directory if
// needed. A stale socket left by a previous sidecar is removed; a live one (something accepts
// connections on it) or a non-socket file at socketPath is an error, never removed. ctx bounds the
// liveness probe of an existing socket. The listener removes the socket when closed.
func ListenUnix(ctx context.Context, socketPath string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(socketPath), 0o750); err != nil {
		return nil, fmt.Errorf("api: create socket directory: %w", err)
	}
	if err := removeStaleSocket(ctx, socketPath); err != nil {
		return nil, err
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "unix", socketPath)
	if err != nil {
		return nil, fmt.Errorf("api: listen on %s: %w", socketPath, err)
	}
	if err := os.Chmod(socketPath, socketMode); err != nil {
		_ = ln.Close()
		return nil, fmt.Errorf("api: set mode %v on %s: %w", socketMode, socketPath, err)
	}
	return ln, nil
}

// removeStaleSocket removes socketPath if it is a socket nobody serves.
func removeStaleSocket(ctx context.Context, socketPath string) error {
	fi, err := os.Lstat(socketPath)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("api: inspect %s: %w", socketPath, err)
	}
	if fi.Mode()&fs.ModeSocket == 0 {
		return fmt.Errorf("api: %s exists and is not a socket (mode %v); remove it or choose another path", socketPath, fi.Mode())
	}
	var d net.Dialer
	if c, err := d.DialContext(ctx, "unix", socketPath); err == nil {
		_ = c.Close()
		return fmt.Errorf("api: another process is serving on %s; stop it or choose another path", socketPath)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("api: check whether %s is in use: %w", socketPath, err)
	}
	if err := os.Remove(socketPath); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("api: remove stale socket %s: %w", socketPath, err)
	}
	return nil
}
