// Package hintudp carries the lock's hand-off hints (lock.Hinter) between processes as UDP
// datagrams: the sidecar listens on its pod IP (port DefaultPort unless the operator sets
// another), the CLI on an address it is given. Each hint is one datagram, a line of text whose
// format AppendHint shows and ParseHint reads (wire.go).
//
// A hint carries no authority (see lock.Hinter): a receiver only looks at the store sooner, and
// the Locker limits how often it does that for hints that brought nothing. So hints are neither
// signed nor encrypted; a NetworkPolicy that lets the pods of a lock's group reach each other on
// the hint port is all they need, and without it waiters fall back to polling.
//
// A hint's destination is read from the lock store, where anyone who may write the keyspace can
// put any address. So a Hinter never sends to a loopback address, which would reach a UDP service
// of its own pod or host instead of another process of the lock, unless Config.AllowLoopback says
// this is a development setup with several processes on one host. It does send to any other
// unicast address: which pods it can reach is the network's to decide (a NetworkPolicy on egress).
//
// A Hinter answers every probe (lock.HintProbe) it receives with an echo of the same fields to the
// probe's source address, whether or not anyone waits for that lock here: the prober learns that
// datagrams from here reach it. An echo is no larger than its probe, never goes to an address a
// hint could not go to (loopback only with AllowLoopback), and at most MaxEchoesPerSecond go out a
// second, so a forged source address cannot turn the hint port into an amplifier.
package hintudp

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"github.com/baton-dev/baton/lock"
)

// DefaultPort is the UDP port the sidecar listens on for hints unless the operator sets another.
const DefaultPort = 9465

// Hinter sends and receives hints on one UDP socket. It is safe for concurrent use.
type Hinter struct {
	conn          *net.UDPConn
	advertise     string
	allowLoopback bool
	log           logr.Logger

	mu      sync.Mutex
	waiters map[waiter]chan lock.Hint
	stats   Stats
	echoes  echoWindow
}

// MaxEchoesPerSecond bounds the echoes a Hinter sends: probes beyond it are counted and dropped,
// and their senders poll as if hints did not reach them. A waiter probes every 2 s, so this is
// the waiters of 2,000 locks waiting behind this process's.
const MaxEchoesPerSecond = 1000

// echoWindow counts the echoes sent in the current second.
type echoWindow struct {
	start time.Time
	sent  int
}

// allow reports whether another echo may go out at now, and counts it.
func (w *echoWindow) allow(now time.Time) bool {
	if now.Sub(w.start) >= time.Second || now.Before(w.start) {
		w.start, w.sent = now, 0
	}
	if w.sent >= MaxEchoesPerSecond {
		return false
	}
	w.sent++
	return true
}

var _ lock.Hinter = (*Hinter)(nil)

type waiter struct{ lockID, owner string }

// Stats counts a Hinter's datagrams.
type Stats struct {
	Sent, SendFailed         int // datagrams sent, and sends that failed or had no usable address
	Received, Delivered      int // datagrams received, and hints (and echoes) handed to a waiting Locker
	Malformed, NobodyWaiting int // datagrams that were not hints, and hints for no waiter here
	// Probes counts the probes received; Echoed those answered (an echo sent back: also counted in
	// Sent or SendFailed). The rest came from an address a hint could not go to, or beyond
	// MaxEchoesPerSecond.
	Probes, Echoed int
}

// Config configures a Hinter.
type Config struct {
	// Bind is the local UDP address to listen on, as host:port; port 0 picks a free port. Required.
	Bind string
	// Advertise is the address other processes reach this one at, written into queue entries: an
	// IP literal and a port (198.18.0.7:9465). Empty: Bind's, which then must name an IP (not
	// 0.0.0.0 or ::) and a port (the chosen one when Bind's is 0).
	Advertise string
	// AllowLoopback lets the Hinter advertise a loopback address and send hints to loopback
	// addresses (127.0.0.0/8, ::1). For development and tests only, where several processes run
	// on one host, each on a loopback address of its own. Off, a loopback address to advertise is
	// an error and a hint to one is dropped and counted in Stats.SendFailed: a queue entry in the
	// store, which any writer of the keyspace controls, cannot make this process send datagrams to
	// its own host.
	AllowLoopback bool
	Log           logr.Logger
}

// New binds the socket and starts receiving; the Hinter stops and closes the socket when ctx ends.
func New(ctx context.Context, cfg Config) (*Hinter, error) {
	bind, err := netip.ParseAddrPort(cfg.Bind)
	if err != nil {
		return nil, fmt.Errorf("hintudp: bind address %q must be an IP literal and a port: %w", cfg.Bind, err)
	}
	var advertise netip.AddrPort
	if cfg.Advertise != "" {
		if advertise, err = netip.ParseAddrPort(cfg.Advertise); err != nil {
			return nil, fmt.Errorf("hintudp: advertised address %q must be an IP literal and a port: %w", cfg.Advertise, err)
		}
		if !usable(advertise, true) {
			return nil, fmt.Errorf("hintudp: advertised address %q cannot be reached by others: name a unicast IP and a port", cfg.Advertise)
		}
	} else if !bind.Addr().IsValid() || bind.Addr().IsUnspecified() {
		return nil, fmt.Errorf("hintudp: bind address %q listens on every address: set the advertised address (the pod IP) too", cfg.Bind)
	}
	if own := cmp.Or(cfg.Advertise, cfg.Bind); !cfg.AllowLoopback && (advertise.Addr().IsLoopback() || bind.Addr().IsLoopback() && !advertise.IsValid()) {
		return nil, fmt.Errorf("%w: %q reaches only this host; advertise the pod IP (loopback is for development setups with several processes on one host)",
			ErrLoopback, own)
	}
	conn, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(bind))
	if err != nil {
		return nil, fmt.Errorf("hintudp: listening on %s: %w", cfg.Bind, err)
	}
	if !advertise.IsValid() {
		advertise = netip.AddrPortFrom(bind.Addr(), uint16(conn.LocalAddr().(*net.UDPAddr).Port))
	}
	h := &Hinter{conn: conn, advertise: advertise.String(), allowLoopback: cfg.AllowLoopback, log: cfg.Log,
		waiters: make(map[waiter]chan lock.Hint)}
	go func() {
		<-ctx.Done()
		_ = conn.Close()
	}()
	go h.receive()
	return h, nil
}

// ErrLoopback is the cause of New's error for a loopback address to advertise without
// Config.AllowLoopback.
var ErrLoopback = errors.New("hintudp: loopback address without AllowLoopback")

// usable reports whether a can be a hint's destination or advertised address; a loopback address
// only with allowLoopback. An IPv4-mapped IPv6 address is judged as the IPv4 address it maps.
func usable(a netip.AddrPort, allowLoopback bool) bool {
	ip := a.Addr().Unmap()
	return a.Port() != 0 && ip.IsValid() && !ip.IsUnspecified() && !ip.IsMulticast() && (allowLoopback || !ip.IsLoopback())
}

// Addr returns the address written into this process's queue entries.
func (h *Hinter) Addr() string { return h.advertise }

// Stats returns the counts so far.
func (h *Hinter) Stats() Stats {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.stats
}

// Listen implements lock.Hinter. A second listener for the same waiter replaces the first. Two
// datagrams may be pending for it, so that the echo of its probe never crowds out a hint.
func (h *Hinter) Listen(lockID, owner string) (string, <-chan lock.Hint, func()) {
	w, ch := waiter{lockID, owner}, make(chan lock.Hint, 2)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.waiters[w] = ch
	return h.advertise, ch, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.waiters[w] == ch {
			delete(h.waiters, w)
		}
	}
}

// Send implements lock.Hinter: one datagram to addr, which must be an IP literal and a port (as
// Addr returns) and not on loopback unless Config.AllowLoopback; anything else is dropped and
// counted. It never waits for an answer.
func (h *Hinter) Send(addr string, hint lock.Hint) {
	to, err := netip.ParseAddrPort(addr)
	if err == nil {
		h.sendTo(to, hint)
		return
	}
	h.mu.Lock()
	h.stats.SendFailed++
	h.mu.Unlock()
	h.log.V(1).Info("hint not sent", "to", addr, "lock", hint.LockID, "err", err.Error())
}

// sendTo sends one datagram to to, unless it is not an address a hint may go to.
func (h *Hinter) sendTo(to netip.AddrPort, hint lock.Hint) {
	var err error
	switch {
	case !h.allowLoopback && to.Addr().Unmap().IsLoopback():
		err = errors.New("a loopback address: refused outside development setups (AllowLoopback)")
	case !usable(to, h.allowLoopback):
		err = errors.New("not a unicast IP and port")
	}
	if err == nil {
		var buf [MaxDatagram]byte
		_, err = h.conn.WriteToUDPAddrPort(AppendHint(buf[:0], hint), to)
	}
	h.mu.Lock()
	if err != nil {
		h.stats.SendFailed++
	} else {
		h.stats.Sent++
	}
	h.mu.Unlock()
	if err != nil {
		h.log.V(1).Info("hint not sent", "to", to.String(), "lock", hint.LockID, "kind", hint.Kind.String(), "err", err.Error())
	}
}

// echo answers a probe that came from from, within MaxEchoesPerSecond.
func (h *Hinter) echo(from netip.AddrPort, probe lock.Hint) {
	h.mu.Lock()
	h.stats.Probes++
	ok := usable(from, h.allowLoopback) && h.echoes.allow(time.Now())
	if ok {
		h.stats.Echoed++
	}
	h.mu.Unlock()
	if !ok {
		h.log.V(1).Info("probe not answered", "from", from.String(), "lock", probe.LockID)
		return
	}
	probe.Kind = lock.HintEcho
	h.sendTo(from, probe)
}

// receive reads datagrams until the socket is closed and hands each hint to its waiter.
func (h *Hinter) receive() {
	buf := make([]byte, MaxDatagram+1)
	for {
		n, from, err := h.conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			h.log.V(1).Info("reading a hint datagram", "err", err.Error())
			continue
		}
		hint, perr := ParseHint(buf[:n])
		h.mu.Lock()
		h.stats.Received++
		var ch chan lock.Hint
		switch {
		case perr != nil:
			h.stats.Malformed++
		case hint.Kind == lock.HintProbe:
		default:
			if ch = h.waiters[waiter{hint.LockID, hint.Owner}]; ch == nil {
				h.stats.NobodyWaiting++
			} else {
				h.stats.Delivered++
			}
		}
		h.mu.Unlock()
		if perr != nil {
			h.log.V(1).Info("dropped a datagram that is not a hint", "from", from.String(), "err", perr.Error())
			continue
		}
		if hint.Kind == lock.HintProbe {
			h.echo(from, hint)
			continue
		}
		if ch != nil {
			select {
			case ch <- hint:
			default: // two pending are enough to make the waiter look
			}
		}
	}
}
