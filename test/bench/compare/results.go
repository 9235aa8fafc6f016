package compare

import (
	"encoding/json"
	"fmt"
	"io"
	"time"
)

// Results is a run's raw data as JSON (docs/bench/compare.json): every sample, in milliseconds,
// and every throughput cell with the figures the tables derive from it. Package plots draws from
// it.
type Results struct {
	Machine      string   `json:"machine"`
	Started      string   `json:"started"` // RFC 3339
	TookSeconds  float64  `json:"tookSeconds"`
	LeaseSeconds float64  `json:"leaseSeconds"`
	Systems      []string `json:"systems"` // in table order
	// Baton names the systems whose rows are checked against baton's targets.
	Baton []string `json:"baton"`
	// LWTMs are the reference LWT round trips taken beside the uncontended acquisitions.
	LWTMs         []float64            `json:"lwtMs"`
	UncontendedMs map[string][]float64 `json:"uncontendedMs"`
	// APIMs are the API round trips taken before each uncontended acquisition (sidecars).
	APIMs      map[string][]float64    `json:"apiMs,omitempty"`
	HandoffMs  map[string][]float64    `json:"handoffMs"`
	Failover   map[string]FailoverJSON `json:"failover"`
	Throughput map[string][]CellJSON   `json:"throughput"` // by contender count, ascending
	Fairness   map[string]CellJSON     `json:"fairness"`
	Load       map[string]LoadJSON     `json:"load,omitempty"`
	Targets    map[string]float64      `json:"targets"`
}

// FailoverJSON is FailoverResult in Results.
type FailoverJSON struct {
	SamplesMs []float64 `json:"samplesMs"`
	Early     int       `json:"early"`
	Skipped   string    `json:"skipped,omitempty"`
}

// LoadJSON is a LoadResult in Results: requests per second by role.
type LoadJSON struct {
	LeaseSeconds  float64   `json:"leaseSeconds"`
	WindowSeconds float64   `json:"windowSeconds"`
	Holder        float64   `json:"holder"`
	Head          float64   `json:"head"`
	Others        []float64 `json:"others"`
}

// CellJSON is a Cell in Results.
type CellJSON struct {
	Contenders         int     `json:"contenders"`
	WindowSeconds      float64 `json:"windowSeconds"`
	PerContender       []int   `json:"perContender"`
	Overlaps           int64   `json:"overlaps"`
	Errors             int64   `json:"errors"`
	Handovers          int     `json:"handovers"`
	All                int     `json:"all"`      // acquisitions over warm-up and window
	Requests           int64   `json:"requests"` // store requests over warm-up and window; -1 when not counted
	CyclesPerSecond    float64 `json:"cyclesPerSecond"`
	HandoversPerSecond float64 `json:"handoversPerSecond"`
	Jain               float64 `json:"jain"`
	// RequestsPerAcquisition is Requests ÷ All; -1 when not counted.
	RequestsPerAcquisition float64 `json:"requestsPerAcquisition"`
}

func msOf(ds []time.Duration) []float64 {
	out := make([]float64, len(ds))
	for i, d := range ds {
		out[i] = float64(d) / float64(time.Millisecond)
	}
	return out
}

func cellJSON(c Cell) CellJSON {
	perAcq := c.RequestsPerAcquisition()
	return CellJSON{
		Contenders: c.Contenders, WindowSeconds: c.Window.Seconds(), PerContender: c.PerContender,
		Overlaps: c.Overlaps, Errors: c.Errors, Handovers: c.Handovers, All: c.All, Requests: c.Requests,
		CyclesPerSecond: c.PerSecond(), HandoversPerSecond: c.HandoversPerSecond(), Jain: c.Jain(),
		RequestsPerAcquisition: perAcq,
	}
}

// Results returns the report's raw data; machine describes where it ran.
func (r *Report) Results(machine string) Results {
	res := Results{
		Machine: machine, Started: r.Started.Format(time.RFC3339), TookSeconds: r.Took.Seconds(),
		LeaseSeconds: r.Config.Lease.Seconds(), Systems: r.Systems, LWTMs: msOf(r.LWT),
		UncontendedMs: map[string][]float64{}, APIMs: map[string][]float64{}, HandoffMs: map[string][]float64{},
		Failover: map[string]FailoverJSON{}, Throughput: map[string][]CellJSON{}, Fairness: map[string]CellJSON{},
		Load: map[string]LoadJSON{},
		Targets: map[string]float64{
			"acquireRatio": TargetAcquireRatio, "handoffP50Ms": ms64(TargetHandoffP50), "handoffP99Ms": ms64(TargetHandoffP99),
			"hintedHandoffP50Ms": ms64(TargetHintedHandoffP50), "hintedHandoffP99Ms": ms64(TargetHintedHandoffP99),
			"failoverP99Lease": TargetFailoverP99, "throughputMin": TargetThroughputMin, "jain": TargetJain,
			"requestsPerAcquisition": TargetRequestsPerAcquisition,
			"holderLoad":             TargetHolderLoad, "headLoad": TargetHeadLoad, "waiterLoad": TargetWaiterLoad,
		},
	}
	for _, name := range r.Systems {
		if r.baton[name] {
			res.Baton = append(res.Baton, name)
		}
	}
	for name, s := range r.Uncontended {
		res.UncontendedMs[name] = msOf(s)
	}
	for name, s := range r.API {
		res.APIMs[name] = msOf(s)
	}
	for name, s := range r.Handoff {
		res.HandoffMs[name] = msOf(s)
	}
	for name, l := range r.Load {
		res.Load[name] = LoadJSON{LeaseSeconds: l.Lease.Seconds(), WindowSeconds: l.Window.Seconds(), Holder: l.Holder, Head: l.Head, Others: l.Others}
	}
	for name, f := range r.Failover {
		res.Failover[name] = FailoverJSON{SamplesMs: msOf(f.Samples), Early: f.Early, Skipped: f.Skipped}
	}
	for name, cells := range r.Throughput {
		for _, c := range cells {
			res.Throughput[name] = append(res.Throughput[name], cellJSON(c))
		}
	}
	for name, c := range r.Fairness {
		res.Fairness[name] = cellJSON(c)
	}
	return res
}

func ms64(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// WriteJSON writes res, indented.
func (res Results) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(res); err != nil {
		return fmt.Errorf("compare: writing results: %w", err)
	}
	return nil
}

// ReadResults reads what WriteJSON wrote.
func ReadResults(r io.Reader) (Results, error) {
	var res Results
	if err := json.NewDecoder(r).Decode(&res); err != nil {
		return Results{}, fmt.Errorf("compare: reading results: %w", err)
	}
	return res, nil
}
