//go:build !unix

package freeport

import (
	"fmt"
	"net"
)

// Port returns a port that was free on host a moment ago. Where flock is unavailable nothing is
// reserved: another process may be handed the same port.
func Port(host string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, fmt.Errorf("freeport: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
