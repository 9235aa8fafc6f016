package compare

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// Report holds the measurements of one run, keyed by system name.
type Report struct {
	Config  Config
	Systems []string
	Started time.Time
	Took    time.Duration

	// LWT holds the reference LWT round trips, taken interleaved with the uncontended acquisitions.
	LWT         []time.Duration
	Uncontended map[string][]time.Duration
	Handoff     map[string][]time.Duration
	Failover    map[string]FailoverResult
	Throughput  map[string][]Cell
	Fairness    map[string]Cell

	baton map[string]bool
}

func newReport(cfg Config, systems []System) *Report {
	r := &Report{
		Config: cfg, Started: time.Now(),
		Uncontended: map[string][]time.Duration{}, Handoff: map[string][]time.Duration{},
		Failover: map[string]FailoverResult{}, Throughput: map[string][]Cell{}, Fairness: map[string]Cell{},
		baton: map[string]bool{},
	}
	for _, s := range systems {
		r.Systems = append(r.Systems, s.Name())
		switch s.(type) {
		case *Baton, *Sidecars:
			r.baton[s.Name()] = true
		}
	}
	return r
}

// Targets that the tables check for baton's rows (docs/design.md, Targets).
const (
	TargetAcquireRatio  = 1.5
	TargetHandoffP50    = 100 * time.Millisecond
	TargetHandoffP99    = 300 * time.Millisecond
	TargetFailoverP99   = 1.2 // × lease
	TargetThroughputMin = 0.8 // slowest cell ÷ fastest cell
	TargetJain          = 0.95
)

// table writes a Markdown table.
type table struct {
	w   io.Writer
	err error
}

func newTable(w io.Writer, head ...string) *table {
	t := &table{w: w}
	t.row(head...)
	if t.err == nil {
		_, t.err = fmt.Fprintf(w, "|%s\n", strings.Repeat("---|", len(head)))
	}
	return t
}

func (t *table) row(cells ...string) {
	if t.err != nil {
		return
	}
	_, t.err = fmt.Fprintf(t.w, "| %s |\n", strings.Join(cells, " | "))
}

// Markdown writes one table per measured metric.
func (r *Report) Markdown(w io.Writer) error {
	c := r.Config
	p := &printer{w: w}
	p.f("Lease %v for every system. Run took %v.\n\n", c.Lease, r.Took.Round(time.Second))
	for _, f := range []func(*printer){r.uncontended, r.handoff, r.failover, r.throughput, r.fairness} {
		f(p)
	}
	return p.err
}

type printer struct {
	w   io.Writer
	err error
}

func (p *printer) f(format string, args ...any) {
	if p.err == nil {
		_, p.err = fmt.Fprintf(p.w, format, args...)
	}
}

func (p *printer) table(head ...string) *table { return newTable(p, head...) }

func (p *printer) Write(b []byte) (int, error) {
	if p.err != nil {
		return 0, p.err
	}
	n, err := p.w.Write(b)
	p.err = err
	return n, err
}

func (r *Report) uncontended(p *printer) {
	if len(r.LWT) == 0 {
		return
	}
	lwt50, lwtMean := Percentile(r.LWT, 50), Mean(r.LWT)
	p.f("### Uncontended acquire (%d each after %d untimed rounds, interleaved with one LWT round trip each)\n\n",
		len(r.LWT), uncontendedWarmup(r.Config))
	t := p.table("system", "p50", "p99", "mean", "p50 ÷ LWT p50", "mean ÷ LWT mean", fmt.Sprintf("target ≤ %.1f × LWT", TargetAcquireRatio))
	t.row("one LWT round trip (reference)", ms(lwt50), ms(Percentile(r.LWT, 99)), ms(lwtMean), "1.00", "1.00", "")
	for _, name := range r.Systems {
		s, ok := r.Uncontended[name]
		if !ok {
			continue
		}
		r50, rMean := ratio(Percentile(s, 50), lwt50), ratio(Mean(s), lwtMean)
		target := ""
		if r.baton[name] {
			target = mark(r50 <= TargetAcquireRatio)
		}
		t.row(name, ms(Percentile(s, 50)), ms(Percentile(s, 99)), ms(Mean(s)),
			fmt.Sprintf("%.2f", r50), fmt.Sprintf("%.2f", rMean), target)
	}
	p.f("\n")
}

func (r *Report) handoff(p *printer) {
	if len(r.Handoff) == 0 {
		return
	}
	c := r.Config
	p.f("### Handoff after a graceful release (%d locks × %d handoffs per system)\n\n", c.HandoffPairs, c.HandoffRounds)
	t := p.table("system", "handoffs", "p50", "p99", "max", "target p50 ≤ 100 ms, p99 ≤ 300 ms")
	for _, name := range r.Systems {
		s, ok := r.Handoff[name]
		if !ok {
			continue
		}
		target := ""
		if r.baton[name] {
			target = mark(Percentile(s, 50) <= TargetHandoffP50 && Percentile(s, 99) <= TargetHandoffP99)
		}
		t.row(name, fmt.Sprint(len(s)), ms(Percentile(s, 50)), ms(Percentile(s, 99)), ms(Percentile(s, 100)), target)
	}
	p.f("\n")
}

func (r *Report) failover(p *printer) {
	if len(r.Failover) == 0 {
		return
	}
	c := r.Config
	lease := c.Lease
	p.f("### Failover after the holder is killed (lease %v; %d locks × %d kills per system, all systems at once)\n\n",
		lease, c.FailoverPairs, c.FailoverRounds)
	t := p.table("system", "kills", "p50", "p99", "max", "p50 ÷ lease", "p99 ÷ lease", "early grants", fmt.Sprintf("target p99 ≤ %.1f × lease", TargetFailoverP99))
	for _, name := range r.Systems {
		f, ok := r.Failover[name]
		if !ok {
			continue
		}
		if f.Skipped != "" {
			t.row(name, "–", "–", "–", "–", "–", "–", "–", f.Skipped)
			continue
		}
		p50, p99 := Percentile(f.Samples, 50), Percentile(f.Samples, 99)
		target := ""
		if r.baton[name] {
			target = mark(ratio(p99, lease) <= TargetFailoverP99)
		}
		t.row(name, fmt.Sprint(len(f.Samples)), ms(p50), ms(p99), ms(Percentile(f.Samples, 100)),
			fmt.Sprintf("%.2f", ratio(p50, lease)), fmt.Sprintf("%.2f", ratio(p99, lease)), fmt.Sprint(f.Early), target)
	}
	p.f("\n")
}

func (r *Report) throughput(p *printer) {
	if len(r.Throughput) == 0 {
		return
	}
	c := r.Config
	p.f("### Acquire+release cycles per second on one lock (%v window after %v warm-up per cell)\n\n", c.Window, c.Warmup)
	head := []string{"system"}
	for _, n := range c.Contenders {
		head = append(head, fmt.Sprint(n))
	}
	head = append(head, "slowest ÷ fastest", "overlaps", "errors", fmt.Sprintf("target ≥ %.2f", TargetThroughputMin))
	t := p.table(head...)
	var jain, handed [][]string
	for _, name := range r.Systems {
		cells, ok := r.Throughput[name]
		if !ok {
			continue
		}
		row := []string{name}
		lo, hi := -1.0, 0.0
		var overlaps, errs int64
		jrow, hrow := []string{name}, []string{name}
		for _, cell := range cells {
			v := cell.PerSecond()
			row = append(row, fmt.Sprintf("%.1f", v))
			if lo < 0 || v < lo {
				lo = v
			}
			hi = max(hi, v)
			overlaps += cell.Overlaps
			errs += cell.Errors
			jrow = append(jrow, fmt.Sprintf("%.2f", cell.Jain()))
			hrow = append(hrow, fmt.Sprintf("%.1f", cell.HandoversPerSecond()))
		}
		spread := 0.0
		if hi > 0 {
			spread = lo / hi
		}
		target := ""
		if r.baton[name] {
			target = mark(spread >= TargetThroughputMin)
		}
		row = append(row, fmt.Sprintf("%.2f", spread), fmt.Sprint(overlaps), fmt.Sprint(errs), target)
		t.row(row...)
		jain = append(jain, jrow)
		handed = append(handed, hrow)
	}
	p.f("\nHandovers per second in the same cells: acquisitions by another contender than the one that " +
		"held the lock just before (a lock that lets the releaser take it straight back scores low here " +
		"however high its cycles per second):\n\n")
	ht := p.table(head[:len(c.Contenders)+1]...)
	for _, row := range handed {
		ht.row(row...)
	}
	p.f("\nJain's index over acquisitions per contender in the same cells (1.00 = equal shares; 1 by " +
		"definition with one contender; a strict FIFO that made fewer acquisitions than it has contenders " +
		"in the window scores acquisitions ÷ contenders, so read the fairness table for baton):\n\n")
	jt := p.table(head[:len(c.Contenders)+1]...)
	for _, row := range jain {
		jt.row(row...)
	}
	p.f("\n")
	// Store requests per acquisition where the system counts them (baton).
	for _, name := range r.Systems {
		cells := r.Throughput[name]
		if len(cells) == 0 || cells[0].Requests < 0 {
			continue
		}
		p.f("%s, Cassandra requests per acquisition, all contenders together (warm-up and window):\n\n", name)
		rt := p.table(append([]string{"contenders"}, head[1:len(c.Contenders)+1]...)...)
		row := []string{"requests per acquisition"}
		for _, cell := range cells {
			row = append(row, fmt.Sprintf("%.1f", float64(cell.Requests)/float64(max(cell.All, 1))))
		}
		rt.row(row...)
		p.f("\n")
	}
	// The old algorithm's collisions, which explain its curve.
	for _, name := range r.Systems {
		cells := r.Throughput[name]
		if len(cells) == 0 || cells[0].Outcomes == nil {
			continue
		}
		p.f("%s, attempts per acquisition by outcome (warm-up and window):\n\n", name)
		ot := p.table("contenders", "acquisitions", "ConcurrentAttempt", "AnotherThreadIsOwner", "store errors")
		for _, cell := range cells {
			o, all := cell.Outcomes, float64(max(cell.All, 1))
			ot.row(fmt.Sprint(cell.Contenders), fmt.Sprint(cell.All), fmt.Sprintf("%.2f", float64(o.ConcurrentAttempt)/all),
				fmt.Sprintf("%.2f", float64(o.AnotherThreadIsOwner)/all), fmt.Sprint(o.Errors))
		}
		p.f("\n")
	}
}

func (r *Report) fairness(p *printer) {
	if len(r.Fairness) == 0 {
		return
	}
	c := r.Config
	p.f("### Fairness: %d contenders for %v (after %v warm-up)\n\n", c.FairnessContenders, c.FairnessWindow, c.Warmup)
	t := p.table("system", "acquisitions", "cycles/s", "fewest per contender", "most per contender", "Jain's index", "overlaps", fmt.Sprintf("target ≥ %.2f", TargetJain))
	for _, name := range r.Systems {
		cell, ok := r.Fairness[name]
		if !ok {
			continue
		}
		lo, hi := -1, 0
		for _, k := range cell.PerContender {
			if lo < 0 || k < lo {
				lo = k
			}
			hi = max(hi, k)
		}
		target := ""
		if r.baton[name] {
			target = mark(cell.Jain() >= TargetJain)
		}
		t.row(name, fmt.Sprint(cell.Cycles()), fmt.Sprintf("%.1f", cell.PerSecond()), fmt.Sprint(lo), fmt.Sprint(hi),
			fmt.Sprintf("%.3f", cell.Jain()), fmt.Sprint(cell.Overlaps), target)
	}
	p.f("\n")
}

func ratio(a, b time.Duration) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}
