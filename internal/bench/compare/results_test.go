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
	}
}
