package hintudp_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/testing/testenv"
	"github.com/baton-dev/baton/lock"
	"github.com/baton-dev/baton/lock/hintudp"
)

// prober is a raw UDP socket that sends probes to a Hinter and counts the echoes it gets back.
type prober struct {
	t    *testing.T
	conn *net.UDPConn
	to   netip.AddrPort
}

// newProber binds a socket on ip (port 0 unless port is given).
func newProber(t *testing.T, ip string, port int, to string) *prober {
	t.Helper()
	conn, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(netip.MustParseAddr(ip), uint16(port))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return &prober{t: t, conn: conn, to: netip.MustParseAddrPort(to)}
}

// probe sends n probes for lock "orders", in batches that the Hinter h has counted before the next
// goes (a burst of thousands would overflow the socket buffers on loopback), and returns how many
// echoes came back, read after each batch.
func (p *prober) probe(h *hintudp.Hinter, n int) (echoes int) {
	p.t.Helper()
	dgram := hintudp.AppendHint(nil, lock.Hint{LockID: "orders", Owner: "prober#1", Enqueued: 1, Kind: lock.HintProbe})
	for sent := 0; sent < n; {
		batch := min(100, n-sent)
		base := h.Stats().Probes
		for range batch {
			if _, err := p.conn.WriteToUDPAddrPort(dgram, p.to); err != nil {
				p.t.Fatal(err)
			}
		}
		sent += batch
		testenv.WaitFor(p.t, "probes counted", time.Minute, func() bool { return h.Stats().Probes == base+batch })
		echoes += p.drain(10 * time.Millisecond) // the rest is read after the next batch
	}
	return echoes + p.drain(200*time.Millisecond)
}

// drain reads what came back until nothing more arrives for quiet, and counts it.
func (p *prober) drain(quiet time.Duration) int {
	n := 0
	buf := make([]byte, hintudp.MaxDatagram+1)
	for {
		_ = p.conn.SetReadDeadline(time.Now().Add(quiet))
		if _, err := p.conn.Read(buf); err != nil {
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				p.t.Fatal(err)
			}
			return n
		}
		n++
	}
}

// budgetHinter is a Hinter on 127.0.0.1 whose echo budgets run on a clock the test moves, with a
// waiter of lock "orders" listening (so that probes of that lock are answered).
func budgetHinter(t *testing.T, ctx context.Context, cfg hintudp.Config) (*hintudp.Hinter, *time.Time) {
	t.Helper()
	cfg.AllowLoopback = true
	if cfg.Bind == "" {
		cfg.Bind = "127.0.0.1:0"
	}
	h, err := hintudp.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC)
	hintudp.SetClock(h, func() time.Time { return now })
	_, _, stop := h.Listen("orders", "ahead#1")
	t.Cleanup(stop)
	return h, &now
}

// TestEchoBudget: a burst of 1,500 probes from one socket within a second is answered 1,000 times
// (MaxEchoesPerSecond, and the source's burst MaxEchoesPerSource); the rest are counted as Limited.
func TestEchoBudget(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h, _ := budgetHinter(t, ctx, hintudp.Config{})
	p := newProber(t, "127.0.0.1", 0, h.Addr())
	got := p.probe(h, 1500)
	s := h.Stats()
	t.Logf("1,500 probes: %d echoes received; stats %+v", got, s)
	if s.Echoed != hintudp.MaxEchoesPerSecond || s.Limited != 1500-hintudp.MaxEchoesPerSecond {
		t.Errorf("Echoed %d, Limited %d; want %d and %d", s.Echoed, s.Limited, hintudp.MaxEchoesPerSecond, 1500-hintudp.MaxEchoesPerSecond)
	}
}

// TestEchoBudgetPerSource: one source that floods the hint port (1,500 probes a second, for two
// seconds) does not starve another source's echoes: once its burst is spent it gets at most
// EchoesPerSourcePerSecond, and the global budget of the second second leaves room for others. With
// one global budget alone the flood took every echo of the second, and the other source's waiters
// went deaf.
func TestEchoBudgetPerSource(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h, now := budgetHinter(t, ctx, hintudp.Config{})
	flood := newProber(t, "127.0.0.1", 0, h.Addr())
	other := newProber(t, "127.0.0.2", 0, h.Addr())
	first := flood.probe(h, 1500)
	*now = now.Add(time.Second) // the test's goroutine alone moves the clock, between batches
	hintudp.SetClock(h, func() time.Time { return *now })
	second := flood.probe(h, 1500)
	got := other.probe(h, 10)
	t.Logf("flooding source: %d echoes in its first second, %d in its second; the other source: %d of 10", first, second, got)
	if got != 10 {
		t.Errorf("the other source got %d echoes of 10 while one source flooded; want all (stats %+v)", got, h.Stats())
	}
	if second > hintudp.EchoesPerSourcePerSecond {
		t.Errorf("the flooding source got %d echoes in its second second; want at most %d", second, hintudp.EchoesPerSourcePerSecond)
	}
}

// TestEchoOnlyFromHintPort: with Config.EchoPort (the sidecar sets its hint port, which all
// sidecars share) a probe from another port, as a forged source address would name, is left
// unanswered and counted as Refused; one from the hint port is answered.
func TestEchoOnlyFromHintPort(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	port := testenv.FreePort(t)
	h, _ := budgetHinter(t, ctx, hintudp.Config{Bind: fmt.Sprintf("127.0.0.1:%d", port), EchoPort: uint16(port)})
	elsewhere := newProber(t, "127.0.0.2", 0, h.Addr())
	if got := elsewhere.probe(h, 1); got != 0 || h.Stats().Refused != 1 {
		t.Errorf("a probe from another port got %d echoes (stats %+v); want none, counted as Refused", got, h.Stats())
	}
	peer := newProber(t, "127.0.0.2", port, h.Addr())
	if got := peer.probe(h, 1); got != 1 {
		t.Errorf("a probe from the hint port got %d echoes (stats %+v); want 1", got, h.Stats())
	}
}
