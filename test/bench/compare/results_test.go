package compare

import (
	"bytes"
	"testing"
	"time"
)

// TestResultsRoundTrip: a report's raw data survives JSON, with durations in milliseconds and the
// per-cell figures the tables show.
func TestResultsRoundTrip(t *testing.T) {
	r := &Report{
		Config: Config{Lease: 3 * time.Second}, Systems: []string{"a", "b"}, Started: time.Unix(1700000000, 0), Took: time.Minute,
		LWT:         []time.Duration{2 * time.Millisecond},
		Uncontended: map[string][]time.Duration{"a": {1500 * time.Microsecond}},
		Handoff:     map[string][]time.Duration{"a": {6 * time.Millisecond, 8 * time.Millisecond}},
		Failover:    map[string]FailoverResult{"a": {Samples: []time.Duration{3 * time.Second}, Early: 1}, "b": {Skipped: "no"}},
		Throughput: map[string][]Cell{"a": {{Contenders: 2, Window: 2 * time.Second, PerContender: []int{100, 100},
			Handovers: 200, All: 250, Requests: 1250}}},
		Fairness: map[string]Cell{},
		API:      map[string][]time.Duration{"a": {250 * time.Microsecond}},
		Load:     map[string]LoadResult{"a": {Lease: 15 * time.Second, Window: 20 * time.Second, Holder: 0.2, Head: 8, Others: []float64{1, 1.5}}},
		baton:    map[string]bool{"a": true},
	}
	var buf bytes.Buffer
	if err := r.Results("test machine").WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	res, err := ReadResults(&buf)
	if err != nil {
		t.Fatal(err)
	}
	c := res.Throughput["a"][0]
	switch {
	case res.LeaseSeconds != 3 || len(res.Baton) != 1 || res.Baton[0] != "a":
		t.Errorf("lease %v, baton systems %v", res.LeaseSeconds, res.Baton)
	case res.HandoffMs["a"][1] != 8 || res.UncontendedMs["a"][0] != 1.5 || res.Failover["a"].SamplesMs[0] != 3000 || res.Failover["b"].Skipped != "no":
		t.Errorf("samples %+v %+v %+v", res.HandoffMs, res.UncontendedMs, res.Failover)
	case c.CyclesPerSecond != 100 || c.HandoversPerSecond != 100 || c.Jain != 1 || c.RequestsPerAcquisition != 5:
		t.Errorf("cell %+v", c)
	case res.APIMs["a"][0] != 0.25:
		t.Errorf("API round trips %+v", res.APIMs)
	case res.Load["a"].LeaseSeconds != 15 || res.Load["a"].Head != 8 || len(res.Load["a"].Others) != 2 || res.Targets["waiterLoad"] != 2:
		t.Errorf("load %+v, targets %+v", res.Load, res.Targets)
	}
	var md bytes.Buffer
	if err := r.Markdown(&md); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| a | 0.20 | 8.00 | 1.25 | 1.50 | ✓ |", "its API round trip"} {
		if !bytes.Contains(md.Bytes(), []byte(want)) {
			t.Errorf("the Markdown lacks %q:\n%s", want, md.String())
		}
	}
}
