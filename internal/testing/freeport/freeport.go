//go:build unix

// Package freeport hands out local ports to test rigs and tests, unique across every process on
// the machine that takes its ports here. A port is reserved by an advisory flock on a file named
// after it in os.TempDir()/baton-ports, held until the process exits, and is taken only when a TCP
// and a UDP socket can both bind it on the host asked for. Ports come from 20000-32767, below
// Linux's ephemeral range (32768-60999): no socket bound to port 0 and no outgoing connection
// ever takes one of them, and testenv's Cassandra ports (7000-10500) lie below it.
//
// What it does not guarantee: a program that binds a fixed port in that range without asking
// here can still take a port between Port returning and the caller binding it. A reservation
// lasts as long as the process; there is no release.
package freeport

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
)

const (
	first = 20000
	last  = 32767
)

// held keeps this process's lock files open (a closed or collected file drops its flock). It is
// process-wide because a reservation is: the flock belongs to the process.
var held struct {
	sync.Mutex
	files []*os.File
}

// Port reserves a port free for TCP and UDP on host (an IP address) for the rest of this
// process's life and returns it.
func Port(host string) (int, error) {
	dir := filepath.Join(os.TempDir(), "baton-ports")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return 0, fmt.Errorf("freeport: %w", err)
	}
	n := last - first + 1
	start := rand.IntN(n)
	for i := range n {
		port := first + (start+i)%n
		f, err := lock(filepath.Join(dir, strconv.Itoa(port)))
		if err != nil {
			return 0, err
		}
		if f == nil {
			continue // another process (or this one) has it
		}
		if !bindable(host, port) {
			_ = f.Close()
			continue
		}
		held.Lock()
		held.files = append(held.files, f)
		held.Unlock()
		return port, nil
	}
	return 0, fmt.Errorf("freeport: no free port in %d-%d on %s", first, last, host)
}

// lock takes the flock on path without waiting: nil when another open file holds it.
func lock(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return nil, fmt.Errorf("freeport: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, nil
		}
		return nil, fmt.Errorf("freeport: locking %s: %w", path, err)
	}
	return f, nil
}

// bindable reports whether a TCP listener and a UDP socket can bind host:port right now.
func bindable(host string, port int) bool {
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return false
	}
	_ = l.Close()
	c, err := net.ListenPacket("udp", addr)
	if err != nil {
		return false
	}
	_ = c.Close()
	return true
}
