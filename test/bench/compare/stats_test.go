package compare_test

import (
	"math"
	"testing"
	"time"

	"github.com/baton-dev/baton/test/bench/compare"
)

func TestPercentile(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, x := range v {
			out[i] = time.Duration(x) * time.Millisecond
		}
		return out
	}
	hundred := make([]int, 100)
	for i := range hundred {
		hundred[i] = 100 - i // 100 … 1, unsorted on purpose
	}
	for _, tc := range []struct {
		name    string
		samples []time.Duration
		p       float64
		want    time.Duration
	}{
		{"empty", nil, 50, 0},
		{"one", ms(7), 99, 7 * time.Millisecond},
		{"median of four is the second", ms(4, 1, 3, 2), 50, 2 * time.Millisecond},
		{"p99 of 100 is the 99th", ms(hundred...), 99, 99 * time.Millisecond},
		{"p100 is the max", ms(hundred...), 100, 100 * time.Millisecond},
		{"p1 of 100 is the min", ms(hundred...), 1, time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := compare.Percentile(tc.samples, tc.p); got != tc.want {
				t.Fatalf("Percentile(%v) = %v, want %v", tc.p, got, tc.want)
			}
		})
	}
}

func TestJain(t *testing.T) {
	for _, tc := range []struct {
		name   string
		counts []int
		want   float64
	}{
		{"equal", []int{5, 5, 5, 5}, 1},
		{"one got all", []int{8, 0, 0, 0}, 0.25},
		{"nothing", []int{0, 0}, 0},
		{"two to one", []int{2, 1}, 0.9},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := compare.Jain(tc.counts); math.Abs(got-tc.want) > 1e-9 {
				t.Fatalf("Jain(%v) = %v, want %v", tc.counts, got, tc.want)
			}
		})
	}
}
