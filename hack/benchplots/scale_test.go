package main

import (
	"encoding/json"
	"image/png"
	"os"
	"path/filepath"
	"testing"

	"github.com/baton-dev/baton/test/bench/compare"
)

// TestWriteScale draws the scale charts from made-up results: every chart, a readable PNG; without
// an operator in the results, no operator charts.
func TestWriteScale(t *testing.T) {
	op := func(cores float64, rss int64) *compare.OperatorLoad {
		return &compare.OperatorLoad{Cores: cores, RSS: rss}
	}
	results := []compare.ScaleResult{
		{System: "baton", Locks: 10, ServerPerLock: 1.4, Operator: op(0.01, 60<<20)},
		{System: "leases", Locks: 10, ServerPerLock: 1.2},
		{System: "baton", Locks: 1000, ServerPerLock: 1.3, Operator: op(0.05, 90<<20)},
		{System: "leases", Locks: 1000, ServerPerLock: 0.9},
	}
	draw := func(results []compare.ScaleResult) []string {
		dir := t.TempDir()
		b, err := json.Marshal(results)
		if err != nil {
			t.Fatal(err)
		}
		in := filepath.Join(dir, "scale.json")
		if err := os.WriteFile(in, b, 0o644); err != nil {
			t.Fatal(err)
		}
		written, err := writeScale(in, dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range written {
			f, err := os.Open(p)
			if err != nil {
				t.Fatal(err)
			}
			img, err := png.Decode(f)
			f.Close()
			if err != nil || img.Bounds().Dx() < 500 {
				t.Errorf("%s: %v, %v", p, img.Bounds(), err)
			}
		}
		return written
	}
	if w := draw(results); len(w) != len(ScaleFiles) {
		t.Errorf("wrote %v, want every one of %v", w, ScaleFiles)
	}
	for i := range results {
		results[i].Operator = nil
	}
	if w := draw(results); len(w) != 1 {
		t.Errorf("without an operator: wrote %v, want only %s", w, ScaleFiles[0])
	}
}
