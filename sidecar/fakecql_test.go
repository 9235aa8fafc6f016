package sidecar

import (
	"encoding/binary"
	"io"
	"net"
	"sync/atomic"
	"testing"
)

// refusingCQL is a fake Cassandra, not a real one: a loopback TCP listener that speaks the native
// protocol's handshake only as far as a login (OPTIONS, STARTUP, AUTH_RESPONSE) and refuses every
// login as Cassandra's PasswordAuthenticator refuses a wrong password (error 0x0100). A client
// without credentials gets the AUTHENTICATE request and nothing more. It counts connections.
type refusingCQL struct {
	ln    net.Listener
	conns atomic.Int64
}

func newRefusingCQL(t *testing.T) *refusingCQL {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &refusingCQL{ln: ln}
	done := make(chan struct{})
	go func() { defer close(done); f.serve() }()
	t.Cleanup(func() { ln.Close(); <-done })
	return f
}

func (f *refusingCQL) addr() string { return f.ln.Addr().String() }

func (f *refusingCQL) serve() {
	var open []net.Conn
	defer func() {
		for _, c := range open {
			c.Close()
		}
	}()
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		f.conns.Add(1)
		open = append(open, c)
		go f.answer(c)
	}
}

// answer answers one connection's frames (a 9-byte header: version, flags, stream (2 bytes),
// opcode, body length; then the body) until the client closes it.
func (f *refusingCQL) answer(c net.Conn) {
	defer c.Close()
	const (
		opError, opStartup, opAuthenticate, opOptions, opSupported, opAuthResponse = 0x00, 0x01, 0x03, 0x05, 0x06, 0x0F
	)
	var h [9]byte
	for {
		if _, err := io.ReadFull(c, h[:]); err != nil {
			return
		}
		if _, err := io.CopyN(io.Discard, c, int64(binary.BigEndian.Uint32(h[5:9]))); err != nil {
			return
		}
		var op byte
		var body []byte
		switch {
		case h[0] >= 5: // protocol v5 and later: refused, so that the driver falls back to v4
			op = opError
			body = append(binary.BigEndian.AppendUint32(nil, 0x000A), cqlString("Invalid or unsupported protocol version (5)")...)
		case h[4] == opOptions:
			op, body = opSupported, []byte{0, 0}
		case h[4] == opStartup:
			op, body = opAuthenticate, cqlString("org.apache.cassandra.auth.PasswordAuthenticator")
		case h[4] == opAuthResponse:
			op = opError
			body = append(binary.BigEndian.AppendUint32(nil, 0x0100), cqlString("Provided username baton and/or password are incorrect")...)
		default:
			return
		}
		out := append([]byte{h[0] | 0x80, 0, h[2], h[3], op}, binary.BigEndian.AppendUint32(nil, uint32(len(body)))...)
		if _, err := c.Write(append(out, body...)); err != nil {
			return
		}
	}
}

func cqlString(s string) []byte {
	return append(binary.BigEndian.AppendUint16(nil, uint16(len(s))), s...)
}
