package compare

import (
	"fmt"
	"io"
	"slices"
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
	// API holds, for systems reached through an API (APIProber), one cheap API round trip taken
	// just before each uncontended acquisition: what the transport adds.
	API        map[string][]time.Duration
	Handoff    map[string][]time.Duration
	Failover   map[string]FailoverResult
	Throughput map[string][]Cell
	Fairness   map[string]Cell
	// Load is measured by LoadSystems, on systems at Config.LoadLease.
	Load map[string]LoadResult

	baton  map[string]bool
	hinted map[string]bool
}

func newReport(cfg Config, systems []System) *Report {
	r := &Report{
		Config: cfg, Started: time.Now(),
		Uncontended: map[string][]time.Duration{}, API: map[string][]time.Duration{}, Handoff: map[string][]time.Duration{},
		Failover: map[string]FailoverResult{}, Throughput: map[string][]Cell{}, Fairness: map[string]Cell{},
		Load: map[string]LoadResult{}, baton: map[string]bool{}, hinted: map[string]bool{},
	}
	for _, s := range systems {
		r.Systems = append(r.Systems, s.Name())
		switch s := s.(type) {
		case *Baton:
			r.baton[s.Name()], r.hinted[s.Name()] = true, len(s.hinters) > 0
		case *Sidecars:
			r.baton[s.Name()], r.hinted[s.Name()] = true, s.cfg.HintPort > 0
		}
	}
	return r
}

// Targets that the tables check for baton's rows (docs/design.md, Targets; issue 11 tightened the
// acquire ratio from 1.5 and set the hinted handoff and the per-acquisition request targets).
const (
	TargetAcquireRatio = 1.1
	// TargetHandoffP50 and TargetHandoffP99 hold for baton polling alone (no hints);
	// TargetHintedHandoffP50 and P99 for baton with hand-off hints.
	TargetHandoffP50       = 100 * time.Millisecond
	TargetHandoffP99       = 300 * time.Millisecond
	TargetHintedHandoffP50 = 15 * time.Millisecond
	TargetHintedHandoffP99 = 50 * time.Millisecond
	TargetFailoverP99      = 1.2 // × lease
	TargetThroughputMin    = 0.8 // slowest cell ÷ fastest cell
	TargetJain             = 0.95
	// TargetRequestsPerAcquisition holds with hand-off hints at the largest contender count (64).
	TargetRequestsPerAcquisition = 8.0
)

// jainTargetAt are the contender counts of the throughput table whose Jain's index is checked.
var jainTargetAt = []int{16, 64}

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
	p.f("Lease %v for every system (the store-load table: %v). Run took %v.\n\n", c.Lease, c.LoadLease, r.Took.Round(time.Second))
	for _, f := range []func(*printer){r.uncontended, r.handoff, r.failover, r.throughput, r.fairness, r.load} {
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
	t := p.table("system", "p50", "p99", "mean", "p50 ÷ LWT p50", "mean ÷ LWT mean", "API round trip p50",
		fmt.Sprintf("target ≤ %.1f × LWT", TargetAcquireRatio))
	t.row("one LWT round trip (reference)", ms(lwt50), ms(Percentile(r.LWT, 99)), ms(lwtMean), "1.00", "1.00", "", "")
	var notes []string
	for _, name := range r.Systems {
		s, ok := r.Uncontended[name]
		if !ok {
			continue
		}
		r50, rMean := ratio(Percentile(s, 50), lwt50), ratio(Mean(s), lwtMean)
		target, api := "", ""
		if r.baton[name] {
			target = mark(r50 <= TargetAcquireRatio)
		}
		if a := r.API[name]; len(a) > 0 {
			a50 := Percentile(a, 50)
			api = ms(a50)
			notes = append(notes, fmt.Sprintf("%s: its API round trip (GET of the lock's status over the unix socket, "+
				"taken just before each acquisition) is %.2f × LWT; the acquisition less that is %.2f × LWT.",
				name, ratio(a50, lwt50), ratio(Percentile(s, 50)-a50, lwt50)))
		}
		t.row(name, ms(Percentile(s, 50)), ms(Percentile(s, 99)), ms(Mean(s)),
			fmt.Sprintf("%.2f", r50), fmt.Sprintf("%.2f", rMean), api, target)
	}
	for _, n := range notes {
		p.f("\n%s\n", n)
	}
	p.f("\n")
}

func (r *Report) handoff(p *printer) {
	if len(r.Handoff) == 0 {
		return
	}
	c := r.Config
	p.f("### Handoff after a graceful release (%d locks × %d handoffs per system)\n\n", c.HandoffPairs, c.HandoffRounds)
	t := p.table("system", "handoffs", "p50", "p99", "max", "target (polling: p50 ≤ 100 ms, p99 ≤ 300 ms; with hints: ≤ 15 ms, ≤ 50 ms)")
	for _, name := range r.Systems {
		s, ok := r.Handoff[name]
		if !ok {
			continue
		}
		target := ""
		if r.baton[name] {
			p50, p99 := TargetHandoffP50, TargetHandoffP99
			if r.hinted[name] {
				p50, p99 = TargetHintedHandoffP50, TargetHintedHandoffP99
			}
			target = fmt.Sprintf("%s (≤ %v, ≤ %v)", mark(Percentile(s, 50) <= p50 && Percentile(s, 99) <= p99), p50, p99)
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
		jtarget := ""
		if r.baton[name] {
			jtarget = mark(jainMet(cells))
		}
		jrow = append(jrow, jtarget)
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
	jt := p.table(append(head[:len(c.Contenders)+1:len(c.Contenders)+1], fmt.Sprintf("target ≥ %.2f at %s", TargetJain, joinInts(jainTargetAt)))...)
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
		rhead := append([]string{"contenders"}, head[1:len(c.Contenders)+1]...)
		if r.hinted[name] {
			rhead = append(rhead, fmt.Sprintf("target ≤ %.0f at %d", TargetRequestsPerAcquisition, cells[len(cells)-1].Contenders))
		}
		rt := p.table(rhead...)
		row := []string{"requests per acquisition"}
		for _, cell := range cells {
			row = append(row, fmt.Sprintf("%.1f", cell.RequestsPerAcquisition()))
		}
		if r.hinted[name] {
			row = append(row, mark(cells[len(cells)-1].RequestsPerAcquisition() <= TargetRequestsPerAcquisition))
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

// jainMet reports whether the cells at the contender counts of jainTargetAt (those measured) reach
// TargetJain.
func jainMet(cells []Cell) bool {
	for _, cell := range cells {
		if slices.Contains(jainTargetAt, cell.Contenders) && cell.Jain() < TargetJain {
			return false
		}
	}
	return true
}

func joinInts(ns []int) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = fmt.Sprint(n)
	}
	return strings.Join(s, " and ")
}

func (r *Report) load(p *printer) {
	if len(r.Load) == 0 {
		return
	}
	c := r.Config
	p.f("### Store load by role: %d contenders on one lock, one holding, the others waiting (%v window after %v; lease %v, the library's default)\n\n",
		c.LoadContenders, c.LoadWindow, c.LoadSettle, c.LoadLease)
	t := p.table("system", "holder (req/s)", "queue head (req/s)", "other waiters, mean (req/s)", "other waiters, max (req/s)",
		fmt.Sprintf("target holder ≤ %.0f, head ≤ %.0f, others ≤ %.0f", TargetHolderLoad, TargetHeadLoad, TargetWaiterLoad))
	for _, name := range r.Systems {
		l, ok := r.Load[name]
		if !ok {
			continue
		}
		sum := 0.0
		for _, v := range l.Others {
			sum += v
		}
		t.row(name, fmt.Sprintf("%.2f", l.Holder), fmt.Sprintf("%.2f", l.Head), fmt.Sprintf("%.2f", sum/float64(max(len(l.Others), 1))),
			fmt.Sprintf("%.2f", l.MaxOthers()), mark(l.Met()))
	}
	p.f("\n")
}

func ratio(a, b time.Duration) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}
