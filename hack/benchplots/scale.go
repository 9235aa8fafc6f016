package main

import (
	"encoding/json"
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

	"github.com/baton-dev/baton/test/bench/compare"
)

// ScaleFiles are the charts writeScale makes from make bench-scale's JSON.
var ScaleFiles = []string{"scale-load.png", "scale-operator-cpu.png", "scale-operator-memory.png"}

// writeScale draws the scale run's charts (scale.json: []compare.ScaleResult) into dir: store
// load per lock against the number of locks for each system, and the operator's CPU and memory
// against the number of locks.
func writeScale(in, dir string) ([]string, error) {
	b, err := os.ReadFile(in)
	if err != nil {
		return nil, fmt.Errorf("%w (write it with make bench-scale)", err)
	}
	var results []compare.ScaleResult
	if err := json.Unmarshal(b, &results); err != nil {
		return nil, fmt.Errorf("%s: %w", in, err)
	}
	if len(results) == 0 {
		return nil, fmt.Errorf("%s: no results", in)
	}
	charts := []func([]compare.ScaleResult) (*plot.Plot, error){scaleLoad, operatorCPU, operatorMemory}
	var written []string
	for i, chart := range charts {
		p, err := chart(results)
		if err != nil {
			return written, fmt.Errorf("%s: %w", ScaleFiles[i], err)
		}
		if p == nil {
			continue
		}
		path := filepath.Join(dir, ScaleFiles[i])
		if err := p.Save(9*vg.Inch, 5*vg.Inch, path); err != nil {
			return written, fmt.Errorf("saving %s: %w", path, err)
		}
		written = append(written, path)
	}
	return written, nil
}

// perLocks returns a plot with a logarithmic x axis ticked at every number of locks of results,
// one line per system of value(r) (results without a value are left out), and the y axis from 0.
func perLocks(results []compare.ScaleResult, title, y string, value func(compare.ScaleResult) (float64, bool)) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text, p.X.Label.Text, p.Y.Label.Text = title, "locks (log scale)", y
	p.Legend.Top, p.Legend.Left = true, true
	p.Add(plotter.NewGrid())
	var systems []string
	var counts []int
	lines := map[string]plotter.XYs{}
	for _, r := range results {
		v, ok := value(r)
		if !ok {
			continue
		}
		if _, seen := lines[r.System]; !seen {
			systems = append(systems, r.System)
		}
		lines[r.System] = append(lines[r.System], plotter.XY{X: float64(r.Locks), Y: v})
		if !slices.Contains(counts, r.Locks) {
			counts = append(counts, r.Locks)
		}
	}
	if len(systems) == 0 {
		return nil, nil
	}
	top := 0.0
	for i, name := range systems {
		l, s, err := plotter.NewLinePoints(lines[name])
		if err != nil {
			return nil, err
		}
		l.Color, s.Color, s.Shape = plotutil.Color(i), plotutil.Color(i), plotutil.Shape(i)
		l.Width = vg.Points(1.5)
		p.Add(l, s)
		p.Legend.Add(name, l, s)
		for _, xy := range lines[name] {
			top = max(top, xy.Y)
		}
	}
	slices.Sort(counts)
	p.X.Scale = plot.LogScale{}
	var ticks []plot.Tick
	for _, n := range counts {
		ticks = append(ticks, plot.Tick{Value: float64(n), Label: fmt.Sprint(n)})
	}
	p.X.Tick.Marker = plot.ConstantTicks(ticks)
	p.Y.Min, p.Y.Max = 0, top*(1.15+0.1*float64(len(systems)))
	return p, nil
}

// budgetLine adds a dashed horizontal line at y across the x range of p.
func budgetLine(p *plot.Plot, results []compare.ScaleResult, y float64, label string) error {
	lo, hi := results[0].Locks, results[0].Locks
	for _, r := range results {
		lo, hi = min(lo, r.Locks), max(hi, r.Locks)
	}
	l, err := plotter.NewLine(plotter.XYs{{X: float64(lo), Y: y}, {X: float64(hi), Y: y}})
	if err != nil {
		return err
	}
	l.Dashes = []vg.Length{vg.Points(4), vg.Points(4)}
	l.Color = color.Gray{Y: 100}
	p.Add(l)
	p.Legend.Add(label, l)
	p.Y.Max = max(p.Y.Max, y*1.4)
	return nil
}

func scaleLoad(results []compare.ScaleResult) (*plot.Plot, error) {
	p, err := perLocks(results, "Requests per second per idle lock of 3, as the server counts them", "requests per second per lock",
		func(r compare.ScaleResult) (float64, bool) { return r.ServerPerLock, r.ServerPerLock >= 0 })
	if err != nil || p == nil {
		return p, err
	}
	return p, budgetLine(p, results, compare.BudgetLockLoad, fmt.Sprintf("budget %.1f", compare.BudgetLockLoad))
}

// operatorRuns returns the runs with an operator, named for the chart's legend.
func operatorRuns(results []compare.ScaleResult, name string) []compare.ScaleResult {
	var out []compare.ScaleResult
	for _, r := range results {
		if r.Operator != nil {
			r.System = name
			out = append(out, r)
		}
	}
	return out
}

func operatorCPU(results []compare.ScaleResult) (*plot.Plot, error) {
	return perLocks(operatorRuns(results, "baton operator, user + system CPU"), "The operator's CPU at rest", "cores",
		func(r compare.ScaleResult) (float64, bool) {
			return opValue(r, func(o *compare.OperatorLoad) float64 { return o.Cores })
		})
}

func operatorMemory(results []compare.ScaleResult) (*plot.Plot, error) {
	return perLocks(operatorRuns(results, "baton operator, resident memory (VmRSS)"), "The operator's memory at rest", "MiB",
		func(r compare.ScaleResult) (float64, bool) {
			return opValue(r, func(o *compare.OperatorLoad) float64 { return float64(o.RSS) / (1 << 20) })
		})
}

// opValue returns f of r's operator, if the run had one.
func opValue(r compare.ScaleResult, f func(*compare.OperatorLoad) float64) (float64, bool) {
	if r.Operator == nil {
		return 0, false
	}
	return f(r.Operator), true
}
