package hintudp_test

import (
	"context"
	"errors"
	"net"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/baton-dev/baton/lock"
	"github.com/baton-dev/baton/lock/hintudp"
)

// TestNoHintsToLoopback: a hint's destination comes from a queue entry in the lock store, which
// anyone with write access to the keyspace can write. A sidecar must not send it to a loopback
// address, where it would reach a UDP service of its own pod (here one on 127.0.0.1) instead of
// another sidecar: such a send is refused and counted as failed, in every spelling of loopback.
// With AllowLoopback (development setups) the same hints arrive.
func TestNoHintsToLoopback(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	victim, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer victim.Close()
	port := victim.LocalAddr().(*net.UDPAddr).AddrPort().Port()
	// A sidecar as in a pod: every address bound, its pod IP advertised.
	h, err := hintudp.New(ctx, hintudp.Config{Bind: "0.0.0.0:0", Advertise: "198.18.0.7:9465"})
	if err != nil {
		t.Fatal(err)
	}
	hint := lock.Hint{LockID: "orders", Owner: "evil#1", Enqueued: 1, Kind: lock.HintFree, Token: 1, Version: 1}
	for _, to := range []string{"127.0.0.1", "127.1.2.3", "[::ffff:127.0.0.1]"} {
		h.Send(to+":"+strconv.Itoa(int(port)), hint)
	}
	if s := h.Stats(); s.Sent != 0 || s.SendFailed != 3 {
		t.Errorf("stats %+v after 3 hints to loopback addresses: want 0 sent, 3 failed", s)
	}
	_ = victim.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	buf := make([]byte, hintudp.MaxDatagram+1)
	if n, from, err := victim.ReadFromUDP(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("a UDP service on 127.0.0.1 received %d bytes from %v (%v): a hint reached loopback", n, from, err)
	}

	dev, err := hintudp.New(ctx, hintudp.Config{Bind: "127.0.0.1:0", AllowLoopback: true})
	if err != nil {
		t.Fatal(err)
	}
	dev.Send(victim.LocalAddr().String(), hint)
	_ = victim.SetReadDeadline(time.Now().Add(time.Minute))
	n, _, err := victim.ReadFromUDP(buf)
	if got, perr := hintudp.ParseHint(buf[:n]); err != nil || perr != nil || got != hint {
		t.Errorf("with AllowLoopback, the loopback listener read %+v (%v, %v), want the hint %+v", got, err, perr, hint)
	}
}
