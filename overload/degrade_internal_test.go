package overload

import (
	"testing"
	"time"
)

// The degradation state machine at capacity 64 with recommendations at
// 0.7 and search at 0.85, hysteresis 0.1, hold 5s: recommendations goes
// off at 45 in flight (45/64 ≥ 0.7 > 44/64) and comes back at 38 or fewer
// (< 0.6 × 64 = 38.4); search goes off at 55 (≥ 54.4) and comes back at
// 47 or fewer (< 48).
func TestStep(t *testing.T) {
	s, err := Config{
		MaxInFlight: 64,
		Degradation: []Feature{{Name: "recommendations", At: 0.7}, {Name: "search", At: 0.85}},
	}.resolve()
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	steps := []struct {
		at   time.Duration // since t0
		n    int64
		want int // features off, from the front of the list
		why  string
	}{
		{0, 44, 0, "44/64 is below 0.7"},
		{0, 45, 1, "recommendations goes at 45"},
		{0, 39, 1, "39 is not below 38.4"},
		{time.Second, 38, 1, "below the way back, but held for 5s"},
		{time.Second, 44, 1, "stays off below its threshold"},
		{time.Second, 55, 2, "search goes at 55"},
		{2 * time.Second, 0, 2, "both held"},
		{5 * time.Second, 0, 2, "recommendations' hold is over, but search, gone after it, must come back first"},
		{6 * time.Second, 0, 0, "both holds are over: last gone, first back"},
		{6 * time.Second, 100, 2, "a jump above capacity switches both off at once, in order"},
		{11 * time.Second, 48, 2, "48 is not below search's 48"},
		{11 * time.Second, 47, 1, "search comes back at 47; recommendations needs 38"},
		{11 * time.Second, 54, 1, "search stays on until 55"},
		{12 * time.Second, 38, 0, "recommendations, off since 6s, comes back"},
	}
	since := make([]time.Time, len(s.features))
	k := 0
	for i, st := range steps {
		k = step(s.features, since, k, st.n, 64, t0.Add(st.at), s.hold)
		if k != st.want {
			t.Fatalf("step %d (%v, %d in flight): %d off, want %d: %s", i, st.at, st.n, k, st.want, st.why)
		}
	}
}
