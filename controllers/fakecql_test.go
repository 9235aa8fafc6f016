package controllers_test

import (
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"sync"
	"testing"
)

// fakeCQL is a fake Cassandra, not a real one: a TCP listener on loopback that speaks just enough
// of the native protocol's handshake (OPTIONS, STARTUP, AUTH_RESPONSE) for a driver to send its
// password login, records every connection and login, and refuses each login the way Cassandra
// refuses a wrong password (its message names the user). It stands for a server that the author
// of a DistributedLock runs to collect what the operator sends it.
type fakeCQL struct {
	ln net.Listener

	mu     sync.Mutex
	conns  int
	logins []login
}

// login is a SASL PLAIN login the fake received.
type login struct{ user, password string }

// newFakeCQL starts a fake server, closed when t ends.
func newFakeCQL(t *testing.T) *fakeCQL {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeCQL{ln: ln}
	go f.serve()
	t.Cleanup(func() { ln.Close() })
	return f
}

func (f *fakeCQL) addr() string { return f.ln.Addr().String() }

// received returns the number of connections and the logins received so far.
func (f *fakeCQL) received() (int, []login) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.conns, append([]login(nil), f.logins...)
}

func (f *fakeCQL) serve() {
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		f.mu.Lock()
		f.conns++
		f.mu.Unlock()
		go f.handle(c)
	}
}

// Opcodes of the native protocol (native_protocol_v4.spec, section 2.4).
const (
	opError, opStartup, opAuthenticate, opOptions, opSupported, opAuthResponse = 0x00, 0x01, 0x03, 0x05, 0x06, 0x0F
	errProtocol, errBadCredentials                                             = 0x000A, 0x0100
)

// handle answers one connection's frames: a 9-byte header (version, flags, stream, opcode, body
// length), then the body.
func (f *fakeCQL) handle(c net.Conn) {
	defer c.Close()
	var h [9]byte
	for {
		if _, err := io.ReadFull(c, h[:]); err != nil {
			return
		}
		body := make([]byte, binary.BigEndian.Uint32(h[5:9]))
		if _, err := io.ReadFull(c, body); err != nil {
			return
		}
		var op byte
		var reply []byte
		switch {
		case h[0] >= 5: // as Cassandra 3 and 4 answer v5: the driver tries v4, whose framing stays simple
			op = opError
			reply = binary.BigEndian.AppendUint32(nil, errProtocol)
			reply = append(reply, cqlString("Invalid or unsupported protocol version (5); supported versions are (3/v3, 4/v4)")...)
		case h[4] == opOptions: // SUPPORTED: an empty string multimap
			op, reply = opSupported, []byte{0, 0}
		case h[4] == opStartup: // AUTHENTICATE with Cassandra's password authenticator
			op, reply = opAuthenticate, cqlString("org.apache.cassandra.auth.PasswordAuthenticator")
		case h[4] == opAuthResponse: // [bytes] token: "\x00user\x00password"
			parts := bytes.SplitN(body[min(4, len(body)):], []byte{0}, 3)
			l := login{}
			if len(parts) == 3 {
				l = login{string(parts[1]), string(parts[2])}
			}
			f.mu.Lock()
			f.logins = append(f.logins, l)
			f.mu.Unlock()
			op = opError
			reply = binary.BigEndian.AppendUint32(nil, errBadCredentials)
			reply = append(reply, cqlString("Provided username "+l.user+" and/or password are incorrect")...)
		default:
			return
		}
		out := append([]byte{h[0] | 0x80, 0, h[2], h[3], op}, binary.BigEndian.AppendUint32(nil, uint32(len(reply)))...)
		if _, err := c.Write(append(out, reply...)); err != nil {
			return
		}
	}
}

func cqlString(s string) []byte {
	return append(binary.BigEndian.AppendUint16(nil, uint16(len(s))), s...)
}
