package overload

import (
	"testing"
	"time"
)

func newTestAIMD(t *testing.T, maxInFlight int, tu Tuning) *aimd {
	t.Helper()
	s, err := Config{MaxInFlight: maxInFlight, Adaptive: true, Tuning: tu}.resolve()
	if err != nil {
		t.Fatal(err)
	}
	return newAIMD(s)
}

// The documented rules of next, one sample at a time.
func TestAIMD(t *testing.T) {
	type sample struct {
		epoch   uint64 // the permit's
		o       outcome
		latency time.Duration
	}
	done := func(d time.Duration) sample { return sample{0, completed, d} }
	drop := sample{0, dropped, 0}
	tests := []struct {
		name    string
		max     int
		tuning  Tuning
		start   int64 // the limit before the samples
		samples []sample
		want    []int64 // the limit after each sample
	}{
		{
			name: "good samples: +1 after as many as the limit, up to MaxInFlight",
			max:  12, start: 10,
			samples: repeat(done(10*time.Millisecond), 10+11+12),
			want:    concat(fill(9, 10), []int64{11}, fill(10, 11), []int64{12}, fill(12, 12)),
		},
		{
			name: "a drop multiplies by 0.9, rounded down",
			max:  64, start: 64,
			samples: []sample{drop},
			want:    []int64{57},
		},
		{
			name: "only one decrease per epoch: drops from older permits change nothing",
			max:  64, start: 64,
			samples: []sample{drop, drop, drop},
			want:    []int64{57, 57, 57},
		},
		{
			name: "ignored samples change nothing",
			max:  12, start: 10,
			samples: repeat(sample{0, ignored, time.Hour}, 20),
			want:    fill(20, 10),
		},
		{
			name: "short average above 1.5 × long: congestion",
			max:  64, start: 64,
			// seed 10ms; 100ms: short = 10 + 90/10 = 19ms, long = 10 + 90/500
			// = 10.18ms; 19 > 15.27.
			samples: []sample{done(10 * time.Millisecond), done(100 * time.Millisecond)},
			want:    []int64{64, 57},
		},
		{
			name: "below the tolerance: no congestion",
			max:  64, start: 64,
			// seed 10ms; 50ms: short = 14ms, long = 10.08ms; 14 < 15.12.
			samples: []sample{done(10 * time.Millisecond), done(50 * time.Millisecond)},
			want:    []int64{64, 64},
		},
		{
			name: "a fast sample is not congestion while the short average is still high",
			max:  64, start: 64,
			// seed 10ms; 100ms (short 19, congested); 10ms: short 18.1ms >
			// 15.3ms, but the sample is fast.
			samples: []sample{done(10 * time.Millisecond), done(100 * time.Millisecond), {1, completed, 10 * time.Millisecond}},
			want:    []int64{64, 57, 57},
		},
		{
			name: "one slow outlier is not congestion: the short average stays low",
			max:  64, start: 64,
			// 20 × 10ms, then 40ms: short = 13ms < 15ms, though 40 > 15.
			samples: append(repeat(done(10*time.Millisecond), 20), done(40*time.Millisecond)),
			want:    fill(21, 64),
		},
		{
			name: "a target: the short average and the sample above it are congestion, even when steady",
			max:  64, start: 64, tuning: Tuning{Target: 200 * time.Millisecond},
			samples: []sample{done(300 * time.Millisecond)},
			want:    []int64{57},
		},
		{
			name: "the floor: ⌈64/10⌉ = 7 by default",
			max:  64, start: 8,
			samples: []sample{drop},
			want:    []int64{7},
		},
		{
			name: "the floor holds",
			max:  64, start: 7,
			samples: []sample{drop},
			want:    []int64{7},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := newTestAIMD(t, tc.max, tc.tuning)
			a.limit = tc.start
			var now uint64
			for i, s := range tc.samples {
				limit, decreased := a.next(s.epoch, now, s.o, s.latency)
				if decreased {
					now++
				}
				if limit != tc.want[i] {
					t.Fatalf("after sample %d: limit %d, want %d", i, limit, tc.want[i])
				}
			}
		})
	}
}

// Successive decreases, each from a permit of the current epoch, walk the
// limit down to the floor: 64, 57, 51, 45, 40, 36, 32, 28, 25, 22, 19, 17,
// 15, 13, 11, 9, 8, 7, 7.
func TestAIMDDescent(t *testing.T) {
	a := newTestAIMD(t, 64, Tuning{})
	want := []int64{57, 51, 45, 40, 36, 32, 28, 25, 22, 19, 17, 15, 13, 11, 9, 8, 7, 7}
	for i, w := range want {
		limit, decreased := a.next(uint64(i), uint64(i), dropped, 0)
		if limit != w || !decreased {
			t.Fatalf("decrease %d: %d (%v), want %d", i, limit, decreased, w)
		}
	}
}

// The default floor: ⌈MaxInFlight/10⌉, but never below the capacity that
// gives every priority a slot.
func TestDefaultMinInFlight(t *testing.T) {
	tests := []struct {
		max    int
		shedAt map[Priority]float64
		want   int64
	}{
		{64, nil, 7},
		{100, nil, 10},
		{10, nil, 2}, // ⌈1⌉ = 1, raised to 2: sheddable needs ⌊0.5 × 2⌋ = 1
		{2, nil, 2},
		{100, map[Priority]float64{Sheddable: 0.05}, 20}, // ⌊0.05 × 20⌋ = 1
		{15, map[Priority]float64{Sheddable: 0.1}, 10},
	}
	for _, tc := range tests {
		s, err := Config{MaxInFlight: tc.max, ShedAt: tc.shedAt, Adaptive: true}.resolve()
		if err != nil {
			t.Fatal(err)
		}
		if s.min != tc.want {
			t.Errorf("MaxInFlight %d %v: default MinInFlight %d, want %d", tc.max, tc.shedAt, s.min, tc.want)
		}
	}
}

func repeat[T any](v T, n int) []T {
	out := make([]T, n)
	for i := range out {
		out[i] = v
	}
	return out
}

func fill(n int, v int64) []int64 { return repeat(v, n) }

func concat(parts ...[]int64) []int64 {
	var out []int64
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}
