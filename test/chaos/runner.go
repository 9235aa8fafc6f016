//go:build linux

package chaos

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/baton-dev/baton/internal/ctxtime"
	"github.com/baton-dev/baton/sidecarclient"
)

// The run workload: each process is `baton run` in direct mode (no sidecar) with the writer
// (chaoswriter) as its command, started again whenever it exits. baton's verbose log reports its
// holds: "lock held" with the time since when, "lock lost" and "lock released" with the time the
// lease stopped being valid and its deadline, by which baton killed the writer if it still ran.

// runnerCommand is baton run's command line and environment: wait up to three leases, then let
// the writer write for up to a lease.
func (p *proc) runnerCommand() (program string, args, env []string) {
	cfg := p.run.cfg
	p.mu.Lock()
	hold := time.Duration(p.rng.Int64N(int64(cfg.Lease)))
	stubborn := p.rng.IntN(3) == 0 // a writer that ignores SIGTERM: baton kills it by the deadline
	p.mu.Unlock()
	env = []string{"CHAOS_FENCED_URL=" + p.run.fencedURL + "/v1/resources/" + cfg.Lock, "CHAOS_WRITER=" + p.name,
		"CHAOS_HOLD=" + hold.String()}
	if stubborn {
		env = append(env, "CHAOS_IGNORE_TERM=1")
	}
	return cfg.Runner, []string{"run", "--verbose",
			"--cassandra-hosts", strings.Join(cfg.Hosts, ","), "--keyspace", cfg.Keyspace,
			"--lock", cfg.Lock, "--lease", cfg.Lease.String(), "--wait", (3 * cfg.Lease).String(), "--grace", "1s",
			"--hint-addr", fmt.Sprintf("127.0.3.%d:%d", p.index+1, hintPort), "--hint-allow-loopback",
			"--", cfg.Writer},
		env
}

// runnerReconnect is how long after a fault healed baton run may still fail to reach Cassandra:
// a connection begun during the fault times out after 5 s (the CLI's cassandraTimeout).
const runnerReconnect = 10 * time.Second

// runnerExitOK says whether a baton run's exit is part of the workload: done (0), or not granted
// within its wait or lost (75), or unable to reach Cassandra (1) during or just after a fault.
func (p *proc) runnerExitOK(err error) bool {
	if p.run.cfg.Workload != WorkloadRun {
		return false
	}
	var ee *exec.ExitError
	if err == nil {
		return true
	}
	if !errors.As(err, &ee) {
		return false
	}
	switch ee.ExitCode() {
	case 75:
		return true
	case 1:
		return p.run.faulting.Load() || time.Since(time.Unix(0, p.run.healedAt.Load())) < runnerReconnect
	}
	return false
}

var (
	runnerMsg      = regexp.MustCompile(`"msg"="(lock held|lock lost|lock released)"`)
	runnerToken    = regexp.MustCompile(`"token"=(\d+)`)
	runnerTime     = regexp.MustCompile(`"(?:since|ended)"="([^"]+)"`)
	runnerDeadline = regexp.MustCompile(`"deadline"="([^"]+)"`)
)

// followRunner reads incarnation inc's log (copying it to out) and turns its reports into the
// events a sidecar would send; at its end (baton and its writer exited) it settles what inc left
// open.
func (p *proc) followRunner(logs *os.File, out io.Writer, inc int, exited <-chan struct{}) {
	defer logs.Close()
	start, granted := time.Now(), false // it waits from its start to its grant, or to its exit
	sc := bufio.NewScanner(logs)
	for sc.Scan() {
		line := sc.Text()
		fmt.Fprintln(out, line)
		if r, ok := parseRunnerLine(line, p.run.cfg.Lock); ok {
			if r.Type == sidecarclient.EventAcquired && !granted {
				granted = true
				p.run.addWait(Wait{Process: p.name, Start: start, End: r.Time})
			}
			p.event(r.Event, inc)
			if !r.Deadline.IsZero() {
				p.mu.Lock()
				idx, ok := p.holdIdx[r.Token]
				p.mu.Unlock()
				if ok {
					p.run.setDeadline(idx, r.Deadline)
				}
			}
		}
	}
	<-exited
	if !granted {
		p.run.addWait(Wait{Process: p.name, Start: start, End: time.Now()})
	}
	p.settle(inc)
}

// runnerReport is one of baton run's reports: an event, and with lost and released the lease's
// deadline.
type runnerReport struct {
	sidecarclient.Event
	Deadline time.Time
}

func parseRunnerLine(line, lockID string) (runnerReport, bool) {
	m, tok, at := runnerMsg.FindStringSubmatch(line), runnerToken.FindStringSubmatch(line), runnerTime.FindStringSubmatch(line)
	if m == nil || tok == nil || at == nil {
		return runnerReport{}, false
	}
	token, err := strconv.ParseInt(tok[1], 10, 64)
	if err != nil {
		return runnerReport{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, at[1])
	if err != nil {
		return runnerReport{}, false
	}
	r := runnerReport{Event: sidecarclient.Event{LockID: lockID, Token: token, Time: t, Type: sidecarclient.EventAcquired}}
	switch m[1] {
	case "lock lost":
		r.Type = sidecarclient.EventLost
	case "lock released":
		r.Type = sidecarclient.EventReleased
	}
	if d := runnerDeadline.FindStringSubmatch(line); d != nil {
		r.Deadline, _ = time.Parse(time.RFC3339Nano, d[1])
	}
	return r, true
}

// runLoop starts baton run again after each exit, after a rest of up to half a lease (the first
// start is Run's). The nemesis only stops it: restartLater tells the loop the next start's clock.
func (p *proc) runLoop(ctx context.Context) {
	for {
		_, exited := p.incarnation()
		select {
		case <-exited:
		case <-ctx.Done():
			return
		}
		p.mu.Lock()
		rest := time.Duration(p.rng.Int64N(int64(p.run.cfg.Lease / 2)))
		p.mu.Unlock()
		if ctxtime.Sleep(ctx, rest) != nil {
			return
		}
		p.mu.Lock()
		offset := p.next
		p.next = 0
		p.mu.Unlock()
		if err := p.start(offset); err != nil {
			if !errors.Is(err, errRunOver) {
				p.run.crash(err.Error())
			}
			return
		}
	}
}
