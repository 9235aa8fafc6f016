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
// A Hinter answers a probe (lock.HintProbe) it receives with an echo of the same fields to the
// probe's source address while another waiter of that lock listens here (the prober waits behind
// it): the prober learns that datagrams from here reach it, and a prober whose waiter ahead has
// left (granted, or gone) hears nothing and polls, instead of resting on the word of a Hinter where
// nobody waits ahead of it any more. An echo is no larger than its probe, never goes to an address
// a hint could not go to (loopback only with AllowLoopback), with Config.EchoPort only to a source
// on the hint port all sidecars share, and at most MaxEchoesPerSecond go out a second, of which
// one source IP gets MaxEchoesPerSource at once and EchoesPerSourcePerSecond after that: a forged
// source address cannot turn the hint port into an amplifier, and one flooding source cannot take
// every echo from the others.
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

	echoPort uint16
	now      func() time.Time // the clock of the echo budgets; time.Now but in tests

	mu        sync.Mutex
	waiters   map[waiter]chan lock.Hint
	listening map[string]int // lock ID: how many waiters listen for it here
	stats     Stats
	echoes    echoWindow
	sources   map[netip.Addr]*echoBucket
}

// MaxEchoesPerSecond bounds the echoes a Hinter sends: probes beyond it are counted and dropped,
// and their senders poll as if hints did not reach them. A waiter probes every 2 s, so this is
// the waiters of 2,000 locks waiting behind this process's.
const MaxEchoesPerSecond = 1000

// MaxEchoesPerSource and EchoesPerSourcePerSecond bound the echoes to one source IP, within
// MaxEchoesPerSecond: a token bucket of MaxEchoesPerSource echoes that refills at
// EchoesPerSourcePerSecond. One process may so have the echoes of 500 locks' waiters behind this
// one's at rest, and a source that floods the hint port takes at most a quarter of the echoes a
// second once its burst is spent, leaving the rest to the others.
const (
	MaxEchoesPerSource       = MaxEchoesPerSecond
	EchoesPerSourcePerSecond = MaxEchoesPerSecond / 4
)

// maxEchoSources bounds how many source IPs a Hinter keeps a bucket for; beyond it, idle buckets
// (full again) are forgotten, and a new source gets no echo until some are.
const maxEchoSources = 4096

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

// echoBucket is one source IP's token bucket of echoes.
type echoBucket struct {
	tokens float64
	at     time.Time // when tokens was last brought up to date
}

// take brings the bucket up to date at now and takes a token if there is one.
func (b *echoBucket) take(now time.Time) bool {
	b.refill(now)
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// refill adds the tokens earned since the last update, up to MaxEchoesPerSource.
func (b *echoBucket) refill(now time.Time) {
	if now.After(b.at) {
		b.tokens = min(MaxEchoesPerSource, b.tokens+now.Sub(b.at).Seconds()*EchoesPerSourcePerSecond)
	}
	b.at = now
}

// allowEchoLocked reports whether an echo to from may go out at now, within the per-source and the
// global budgets, and counts it in both. h.mu is held.
func (h *Hinter) allowEchoLocked(from netip.Addr, now time.Time) bool {
	b := h.sources[from]
	if b == nil {
		if len(h.sources) >= maxEchoSources {
			for ip, o := range h.sources {
				if o.refill(now); o.tokens >= MaxEchoesPerSource {
					delete(h.sources, ip)
				}
			}
			if len(h.sources) >= maxEchoSources {
				return false
			}
		}
		b = &echoBucket{tokens: MaxEchoesPerSource, at: now}
		h.sources[from] = b
	}
	b.refill(now)
	if b.tokens < 1 || !h.echoes.allow(now) {
		return false
	}
	return b.take(now)
}

var _ lock.Hinter = (*Hinter)(nil)

type waiter struct{ lockID, owner string }

// Stats counts a Hinter's datagrams.
type Stats struct {
	Sent, SendFailed         int // datagrams sent, and sends that failed or had no usable address
	Received, Delivered      int // datagrams received, and hints (and echoes) handed to a waiting Locker
	Malformed, NobodyWaiting int // datagrams that were not hints, and hints for no waiter here
	// Probes counts the probes received; Echoed those answered (an echo sent back: also counted in
	// Sent or SendFailed). The rest are left unanswered: NotWaiting for a lock no other waiter
	// listens for here, Refused from an address a hint could not go to or, with Config.EchoPort,
	// from another port, Limited beyond the echo budgets (MaxEchoesPerSecond, per source
	// MaxEchoesPerSource).
	Probes, Echoed               int
	NotWaiting, Refused, Limited int
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
	// EchoPort, when not 0, is the only source port whose probes are answered: the hint port that
	// every sidecar of a cluster listens and sends on (the sidecar sets its own). A probe from
	// another port (a forged source address, sending the echo to some other service) is left
	// unanswered and counted in Stats.Refused. 0 answers probes from any port, for processes
	// that do not share one (the CLI, tests that bind port 0).
	EchoPort uint16
	Log      logr.Logger
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
	h := &Hinter{conn: conn, advertise: advertise.String(), allowLoopback: cfg.AllowLoopback, echoPort: cfg.EchoPort, now: time.Now, log: cfg.Log,
		waiters: make(map[waiter]chan lock.Hint), listening: make(map[string]int), sources: make(map[netip.Addr]*echoBucket)}
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
	if _, ok := h.waiters[w]; !ok {
		h.listening[lockID]++
	}
	h.waiters[w] = ch
	return h.advertise, ch, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.waiters[w] == ch {
			delete(h.waiters, w)
			if h.listening[lockID]--; h.listening[lockID] <= 0 {
				delete(h.listening, lockID)
			}
		}
	}
}

// waitsAheadLocked reports whether a waiter of the probe's lock other than the prober listens here.
// h.mu is held.
func (h *Hinter) waitsAheadLocked(probe lock.Hint) bool {
	n := h.listening[probe.LockID]
	if _, self := h.waiters[waiter{probe.LockID, probe.Owner}]; self {
		n--
	}
	return n > 0
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

// echo answers a probe that came from from: while another waiter of its lock listens here, to a
// source a hint could go to (on EchoPort, if set), within the echo budgets.
func (h *Hinter) echo(from netip.AddrPort, probe lock.Hint) {
	h.mu.Lock()
	h.stats.Probes++
	why := ""
	switch {
	case !h.waitsAheadLocked(probe):
		h.stats.NotWaiting++
		why = "nobody waits for the lock here"
	case !usable(from, h.allowLoopback) || h.echoPort != 0 && from.Port() != h.echoPort:
		h.stats.Refused++
		why = "not from the hint port of a usable address"
	case !h.allowEchoLocked(from.Addr().Unmap(), h.now()):
		h.stats.Limited++
		why = "over the echo budget"
	default:
		h.stats.Echoed++
	}
	h.mu.Unlock()
	if why != "" {
		h.log.V(1).Info("probe not answered", "from", from.String(), "lock", probe.LockID, "why", why)
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
