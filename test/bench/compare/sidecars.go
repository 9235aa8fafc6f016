package compare

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-logr/logr"

	"github.com/baton-dev/baton/internal/testing/freeport"
	"github.com/baton-dev/baton/internal/testing/testenv"
	"github.com/baton-dev/baton/sidecarclient"
)

// Sidecars is baton as pods run it: every contender is a sidecar process of its own (cmd/sidecar
// in Try mode, one pod identity each), driven through its unix-socket API like an application
// would. Each listens for hand-off hints on its own loopback address in 127.80.0.0/16 and one
// shared port, as pods listen on their pod IPs, so hints travel between processes as UDP
// datagrams.
type Sidecars struct {
	cfg SidecarsConfig

	mu     sync.Mutex
	next   int
	closed bool
	procs  map[*sidecarProc]struct{}
}

// SidecarsConfig configures Sidecars.
type SidecarsConfig struct {
	Name     string        // the system's name in the tables
	Binary   string        // the sidecar binary (go build ./cmd/sidecar)
	Hosts    []string      // Cassandra contact points
	Keyspace string        // with baton's schema
	Lease    time.Duration // every sidecar's lease
	HintPort int           // UDP port of every sidecar's hint socket; 0: no hints
	Dir      string        // for the sockets; short, a unix socket path has at most 107 bytes
	Log      logr.Logger
}

// NewSidecars returns the system; Close stops every process it started.
func NewSidecars(cfg SidecarsConfig) (*Sidecars, error) {
	if cfg.Binary == "" || len(cfg.Hosts) == 0 || cfg.Keyspace == "" || cfg.Dir == "" {
		return nil, errors.New("compare: sidecars need a binary, Cassandra hosts, a keyspace and a directory")
	}
	return &Sidecars{cfg: cfg, procs: make(map[*sidecarProc]struct{})}, nil
}

// Name implements System.
func (s *Sidecars) Name() string { return s.cfg.Name }

// Close kills every sidecar process still running.
func (s *Sidecars) Close() {
	s.mu.Lock()
	s.closed = true
	procs := s.procs
	s.procs = map[*sidecarProc]struct{}{}
	s.mu.Unlock()
	for p := range procs {
		p.stop()
	}
}

// Contender implements System: it starts a sidecar process for lockID and waits until its API
// answers.
func (s *Sidecars) Contender(ctx context.Context, lockID string, i int) (Contender, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, errors.New("compare: sidecars closed")
	}
	s.next++
	n := s.next
	s.mu.Unlock()
	metricsPort, err := freeport.Port("127.0.0.1")
	if err != nil {
		return nil, err
	}
	ip := netip.AddrFrom4([4]byte{127, 80, byte(n >> 8), byte(n)})
	socket := filepath.Join(s.cfg.Dir, fmt.Sprintf("c%d.sock", n))
	p := &sidecarProc{
		client:  sidecarclient.New(socket),
		lockID:  lockID,
		metrics: fmt.Sprintf("http://127.0.0.1:%d/metrics", metricsPort),
		exited:  make(chan struct{}),
	}
	p.cmd = exec.Command(s.cfg.Binary)
	p.cmd.Env = append(os.Environ(),
		"BATON_LOCK_IDS="+lockID, "BATON_MODE=Try", "BATON_TRAFFIC_POLICY=None",
		"BATON_LEASE="+s.cfg.Lease.String(), "BATON_SHUTDOWN_TIMEOUT=5s",
		"BATON_CASSANDRA_HOSTS="+strings.Join(s.cfg.Hosts, ","), "BATON_CASSANDRA_KEYSPACE="+s.cfg.Keyspace,
		"POD_NAMESPACE=compare", fmt.Sprintf("POD_NAME=c%d-%d", i, n), fmt.Sprintf("POD_UID=uid-%d-%s", n, randomSuffix()),
		"POD_IP="+ip.String(), fmt.Sprintf("BATON_HINT_PORT=%d", s.cfg.HintPort), "BATON_HINT_ALLOW_LOOPBACK=true",
		"BATON_SOCKET="+socket, fmt.Sprintf("BATON_METRICS_ADDR=127.0.0.1:%d", metricsPort))
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("compare: starting sidecar: %w", err)
	}
	go func() {
		_ = p.cmd.Wait()
		close(p.exited)
	}()
	s.mu.Lock()
	s.procs[p] = struct{}{}
	s.mu.Unlock()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := p.client.Locks(ctx); err == nil {
			return p, nil
		}
		select {
		case <-p.exited:
			return nil, fmt.Errorf("compare: sidecar for %s exited at start: %s", lockID, p.out.String())
		case <-ctx.Done():
			p.stop()
			return nil, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.stop()
			return nil, fmt.Errorf("compare: sidecar for %s did not serve its API within 30s: %s", lockID, p.out.String())
		}
	}
}

// sidecarProc is one sidecar process: a contender of one lock.
type sidecarProc struct {
	cmd     *exec.Cmd
	client  *sidecarclient.Client
	lockID  string
	metrics string
	out     testenv.SyncBuffer
	exited  chan struct{}
	token   atomic.Int64 // of the grant Acquire got, for Release
}

// stop kills the process and waits for it.
func (p *sidecarProc) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
}

// Close implements Closer.
func (p *sidecarProc) Close() { p.stop() }

// Acquire implements Contender: POST /v1/locks/{id}/acquire, waiting up to the API's longest wait.
func (p *sidecarProc) Acquire(ctx context.Context) (Holding, error) {
	st, err := p.client.Acquire(ctx, p.lockID, 10*time.Minute)
	if err != nil {
		return nil, err
	}
	p.token.Store(st.Token)
	return p, nil
}

// Release implements Holding: POST /v1/locks/{id}/release, which returns once the record is
// given back.
func (p *sidecarProc) Release(ctx context.Context) error {
	_, err := p.client.Release(ctx, p.lockID, p.token.Load())
	return err
}

// ProbeAPI implements APIProber: GET /v1/locks/{id}.
func (p *sidecarProc) ProbeAPI(ctx context.Context) error {
	_, err := p.client.Lock(ctx, p.lockID)
	return err
}

// Kill implements Holding: SIGKILL, as a crashed pod.
func (p *sidecarProc) Kill() { p.stop() }

// Requests implements RequestCounter: the lock-store requests the sidecar's metrics count
// (baton_store_request_seconds, every operation), -1 when they cannot be read.
func (p *sidecarProc) Requests() int64 {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.metrics, nil)
	if err != nil {
		return -1
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	var n int64
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "baton_store_request_seconds_count{") {
			continue
		}
		var v float64
		if _, err := fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v); err == nil {
			n += int64(v)
		}
	}
	return n
}
