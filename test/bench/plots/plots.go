// Package plots draws the side-by-side comparison's raw results (compare.Results) as PNG charts for
// docs/benchmarks.md: cycles per second and Jain's index against contenders, the handoff latency
// CDF, the failover histogram, store requests per acquisition and the store load by role.
package plots

import (
	"errors"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

	"github.com/baton-dev/baton/test/bench/compare"
)

// Files are the charts Write makes, in the order it makes them.
var Files = []string{"cycles.png", "handovers.png", "jain.png", "handoff-cdf.png", "failover.png", "requests.png", "load.png"}

// Write draws every chart of res into dir (created if missing) and returns the paths written.
// A chart without data (a run that skipped its metric) is not written.
func Write(dir string, res compare.Results) ([]string, error) {
	if len(res.Systems) == 0 {
		return nil, errors.New("plots: the results name no system")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("plots: %w", err)
	}
	charts := []func(compare.Results) (*chart, error){cycles, handovers, jain, handoffCDF, failover, requests, load}
	var written []string
	for i, chart := range charts {
		p, err := chart(res)
		if err != nil {
			return written, fmt.Errorf("plots: %s: %w", Files[i], err)
		}
		if p == nil {
			continue
		}
		p.headroom()
		path := filepath.Join(dir, Files[i])
		if err := p.Save(9*vg.Inch, 5*vg.Inch, path); err != nil {
			return written, fmt.Errorf("plots: saving %s: %w", path, err)
		}
		written = append(written, path)
	}
	return written, nil
}

// newPlot returns a chart with a title, axis labels and the legend at the top left.
func newPlot(title, x, y string) *chart {
	p := &chart{Plot: plot.New()}
	p.Title.Text = title
	p.X.Label.Text = x
	p.Y.Label.Text = y
	p.Legend.Top = true
	p.Legend.Left = true
	p.Add(plotter.NewGrid())
	return p
}

// chart is a plot that counts its legend's rows.
type chart struct {
	*plot.Plot
	rows int
}

// legend adds a legend row.
func (c *chart) legend(name string, thumbs ...plot.Thumbnailer) {
	c.Legend.Add(name, thumbs...)
	c.rows++
}

// headroom raises the top of the y axis so that the legend, at the top, sits above the data.
func (c *chart) headroom() {
	c.Y.Max = c.Y.Min + (c.Y.Max-c.Y.Min)*(1+0.09*float64(c.rows))
}

// contendersAxis makes p's x axis logarithmic with a tick at every contender count.
func contendersAxis(p *chart, counts []int) {
	p.X.Scale = plot.LogScale{}
	var ticks []plot.Tick
	for _, n := range counts {
		ticks = append(ticks, plot.Tick{Value: float64(n), Label: fmt.Sprint(n)})
	}
	p.X.Tick.Marker = plot.ConstantTicks(ticks)
}

// style gives system i its colour and point shape, the same in every chart.
func style(i int, l *plotter.Line, s *plotter.Scatter) {
	l.Color = plotutil.Color(i)
	l.Width = vg.Points(1.5)
	if s != nil {
		s.Color = plotutil.Color(i)
		s.Shape = plotutil.Shape(i)
	}
}

// perContenders draws one line per system of value(cell) against the contender count.
func perContenders(res compare.Results, p *chart, value func(compare.CellJSON) (float64, bool)) (bool, error) {
	var counts []int
	drawn := false
	for i, name := range res.Systems {
		var xys plotter.XYs
		for _, c := range res.Throughput[name] {
			v, ok := value(c)
			if !ok {
				continue
			}
			xys = append(xys, plotter.XY{X: float64(c.Contenders), Y: v})
			if !slices.Contains(counts, c.Contenders) {
				counts = append(counts, c.Contenders)
			}
		}
		if len(xys) == 0 {
			continue
		}
		l, s, err := plotter.NewLinePoints(xys)
		if err != nil {
			return false, err
		}
		style(i, l, s)
		p.Add(l, s)
		p.legend(name, l, s)
		drawn = true
	}
	slices.Sort(counts)
	contendersAxis(p, counts)
	return drawn, nil
}

func cycles(res compare.Results) (*chart, error) {
	p := newPlot("Acquire+release cycles per second on one lock", "contenders", "cycles per second")
	drawn, err := perContenders(res, p, func(c compare.CellJSON) (float64, bool) { return c.CyclesPerSecond, true })
	if err != nil || !drawn {
		return nil, err
	}
	p.Y.Min = 0
	return p, nil
}

// handovers draws acquisitions by another contender than the previous holder: a lock that lets the
// releaser take it straight back has high cycles per second but few handovers.
func handovers(res compare.Results) (*chart, error) {
	p := newPlot("Handovers per second in the same loop (the lock changed hands)", "contenders", "handovers per second")
	drawn, err := perContenders(res, p, func(c compare.CellJSON) (float64, bool) { return c.HandoversPerSecond, c.Contenders > 1 })
	if err != nil || !drawn {
		return nil, err
	}
	p.Y.Min = 0
	return p, nil
}

func jain(res compare.Results) (*chart, error) {
	p := newPlot("Fairness in the throughput loop (Jain's index over acquisitions per contender)", "contenders", "Jain's index")
	drawn, err := perContenders(res, p, func(c compare.CellJSON) (float64, bool) { return c.Jain, true })
	if err != nil || !drawn {
		return nil, err
	}
	p.Y.Min, p.Y.Max = 0, 1
	target, err := plotter.NewLine(plotter.XYs{{X: 1, Y: res.Targets["jain"]}, {X: 64, Y: res.Targets["jain"]}})
	if err != nil {
		return nil, err
	}
	target.Dashes = []vg.Length{vg.Points(4), vg.Points(4)}
	target.Color = color.Gray{Y: 100}
	p.Add(target)
	p.legend(fmt.Sprintf("target %.2f", res.Targets["jain"]), target)
	return p, nil
}

func requests(res compare.Results) (*chart, error) {
	p := newPlot("Cassandra requests per acquisition (all contenders, warm-up and window)", "contenders", "requests per acquisition")
	drawn, err := perContenders(res, p, func(c compare.CellJSON) (float64, bool) {
		return c.RequestsPerAcquisition, c.RequestsPerAcquisition >= 0
	})
	if err != nil || !drawn {
		return nil, err
	}
	p.Y.Min = 0
	return p, nil
}

// handoffCDF draws, per system, the fraction of handoffs done within x milliseconds.
func handoffCDF(res compare.Results) (*chart, error) {
	p := newPlot("Handoff after a graceful release (CDF)", "milliseconds from the release to the waiter's grant (log scale)", "fraction of handoffs")
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	drawn := false
	for i, name := range res.Systems {
		s := slices.Clone(res.HandoffMs[name])
		if len(s) == 0 {
			continue
		}
		slices.Sort(s)
		xys := make(plotter.XYs, 0, 2*len(s))
		for k, v := range s {
			v = math.Max(v, 0.01) // the log axis has no zero
			xys = append(xys, plotter.XY{X: v, Y: float64(k) / float64(len(s))}, plotter.XY{X: v, Y: float64(k+1) / float64(len(s))})
		}
		l, err := plotter.NewLine(xys)
		if err != nil {
			return nil, err
		}
		style(i, l, nil)
		p.Add(l)
		p.legend(fmt.Sprintf("%s (%d)", name, len(s)), l)
		drawn = true
	}
	if !drawn {
		return nil, nil
	}
	p.Y.Min, p.Y.Max = 0, 1
	return p, nil
}

// failover draws, per system, a histogram of the takeover times after a kill, in leases.
func failover(res compare.Results) (*chart, error) {
	lease := res.LeaseSeconds * 1000
	if lease <= 0 {
		return nil, errors.New("no lease in the results")
	}
	p := newPlot("Failover after the holder is killed", "time from the kill to the waiter's grant, in leases", "kills")
	const binWidth = 0.05 // leases
	drawn := false
	for i, name := range res.Systems {
		f, ok := res.Failover[name]
		if !ok || f.Skipped != "" || len(f.SamplesMs) == 0 {
			continue
		}
		bins := map[int]int{}
		for _, v := range f.SamplesMs {
			bins[int(math.Floor(v/lease/binWidth))]++
		}
		// A step outline per system, so that overlapping histograms stay readable.
		lo, hi := math.MaxInt, math.MinInt
		for b := range bins {
			lo, hi = min(lo, b), max(hi, b)
		}
		var xys plotter.XYs
		for b := lo; b <= hi; b++ {
			x0, x1 := float64(b)*binWidth, float64(b+1)*binWidth
			xys = append(xys, plotter.XY{X: x0, Y: 0}, plotter.XY{X: x0, Y: float64(bins[b])}, plotter.XY{X: x1, Y: float64(bins[b])}, plotter.XY{X: x1, Y: 0})
		}
		l, err := plotter.NewLine(xys)
		if err != nil {
			return nil, err
		}
		style(i, l, nil)
		r, g, b, _ := plotutil.Color(i).RGBA()
		l.FillColor = color.NRGBA{R: uint8(r >> 8), G: uint8(g >> 8), B: uint8(b >> 8), A: 50}
		p.Add(l)
		p.legend(fmt.Sprintf("%s (%d kills)", name, len(f.SamplesMs)), l)
		drawn = true
	}
	if !drawn {
		return nil, nil
	}
	p.Y.Min = 0
	return p, nil
}

// load draws, per role, the store requests per second of each system's contenders on one lock
// (the busiest of the other waiters), with the role's budget as a dashed line.
func load(res compare.Results) (*chart, error) {
	var names []string
	for _, name := range res.Systems {
		if _, ok := res.Load[name]; ok {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return nil, nil
	}
	lease := res.Load[names[0]].LeaseSeconds
	p := newPlot(fmt.Sprintf("Store load by role on one lock (lease %gs)", lease), "role", "requests per second")
	roles := []string{"holder", "queue head", "busiest other waiter"}
	budgets := []float64{res.Targets["holderLoad"], res.Targets["headLoad"], res.Targets["waiterLoad"]}
	width := vg.Points(22)
	for i, name := range names {
		l := res.Load[name]
		others := 0.0
		for _, v := range l.Others {
			others = math.Max(others, v)
		}
		bars, err := plotter.NewBarChart(plotter.Values{l.Holder, l.Head, others}, width)
		if err != nil {
			return nil, err
		}
		bars.Color = plotutil.Color(slices.Index(res.Systems, name))
		bars.LineStyle.Width = 0
		bars.Offset = width * vg.Length(float64(i)-float64(len(names)-1)/2)
		p.Add(bars)
		p.legend(name, bars)
	}
	for k, b := range budgets {
		line, err := plotter.NewLine(plotter.XYs{{X: float64(k) - 0.4, Y: b}, {X: float64(k) + 0.4, Y: b}})
		if err != nil {
			return nil, err
		}
		line.Dashes = []vg.Length{vg.Points(4), vg.Points(4)}
		line.Color = color.Gray{Y: 100}
		p.Add(line)
		if k == 0 {
			p.legend("budget of the role", line)
		}
	}
	p.NominalX(roles...)
	p.Y.Min = 0
	return p, nil
}
