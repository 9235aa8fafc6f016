package plots

import (
	"image/png"
	"os"
	"path/filepath"
	"testing"

	"github.com/baton-dev/baton/test/bench/compare"
)

func TestWrite(t *testing.T) {
	cell := func(n int, cps float64) compare.CellJSON {
		return compare.CellJSON{Contenders: n, CyclesPerSecond: cps, Jain: 1, RequestsPerAcquisition: 5}
	}
	res := compare.Results{
		LeaseSeconds: 3, Systems: []string{"a", "b"}, Targets: map[string]float64{"jain": 0.95},
		HandoffMs:  map[string][]float64{"a": {5, 6, 7}, "b": {0, 100}},
		Failover:   map[string]compare.FailoverJSON{"a": {SamplesMs: []float64{2900, 3100}}, "b": {Skipped: "not measured"}},
		Throughput: map[string][]compare.CellJSON{"a": {cell(1, 200), cell(2, 180)}, "b": {cell(1, 150)}},
		Load:       map[string]compare.LoadJSON{"a": {LeaseSeconds: 15, Holder: 0.2, Head: 9, Others: []float64{1.2, 1.7}}},
	}
	dir := t.TempDir()
	written, err := Write(dir, res)
	if err != nil {
		t.Fatal(err)
	}
	if len(written) != len(Files) {
		t.Fatalf("wrote %v, want every one of %v", written, Files)
	}
	for _, name := range Files {
		f, err := os.Open(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(f)
		f.Close()
		if err != nil || img.Bounds().Dx() < 500 {
			t.Errorf("%s: %v, %v", name, img.Bounds(), err)
		}
	}
	// A run that skipped a metric gets no chart for it, and no error.
	res.HandoffMs, res.Failover, res.Load = nil, nil, nil
	if written, err = Write(t.TempDir(), res); err != nil || len(written) != len(Files)-3 {
		t.Fatalf("without handoff, failover and load data: wrote %v, %v", written, err)
	}
	if _, err := Write(t.TempDir(), compare.Results{}); err == nil {
		t.Fatal("results without systems accepted")
	}
}
