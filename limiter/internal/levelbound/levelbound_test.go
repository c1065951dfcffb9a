package levelbound

import (
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/costguard/costguard/limiter"
)

func TestNew(t *testing.T) {
	b, err := New(limiter.Limit{Algorithm: limiter.TokenBucket, Burst: 20, Rate: 100, Period: time.Minute})
	if err != nil || b != (Bucket{Burst: 20, Unit: 600_000, Refill: 1, Capacity: 12_000_000}) {
		t.Fatalf("seed limit: %+v, %v", b, err)
	}
	for _, l := range []limiter.Limit{
		{Algorithm: limiter.FixedWindow, Rate: 1, Period: time.Second},
		{Algorithm: limiter.TokenBucket, Burst: 0, Rate: 1, Period: time.Second},
	} {
		if _, err := New(l); !errors.Is(err, limiter.ErrInvalidLimit) {
			t.Errorf("%+v: %v; want ErrInvalidLimit", l, err)
		}
	}
}

// Against the engine's own transition: MaxLevel never falls below the true
// level (and equals it when r = 1), and the answers computed from the true
// level are the engine's.
func TestAgainstTakeBucket(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	periods := []time.Duration{time.Second, time.Minute, 333 * time.Millisecond, 7 * time.Microsecond, time.Hour}
	for range 20_000 {
		l := limiter.Limit{
			Algorithm: limiter.TokenBucket + limiter.Algorithm(rng.IntN(3)),
			Burst:     1 + rng.Int64N(1000),
			Rate:      1 + rng.Int64N(1000),
			Period:    periods[rng.IntN(len(periods))],
		}
		b, err := New(l)
		if err != nil {
			continue // a scaled capacity beyond 2^53
		}
		now := int64(1_893_456_000_000_000)
		s := limiter.BucketState{Level: rng.Int64N(b.Capacity + 1), Last: now - rng.Int64N(1000)}
		cost := rng.Int64N(l.Burst + 1)
		s, d, err := limiter.TakeBucket(l, s, now, cost)
		if err != nil {
			t.Fatal(err)
		}
		hi := b.MaxLevel(d, cost)
		if hi < s.Level || hi > b.Capacity {
			t.Fatalf("%+v cost %d: MaxLevel %d, true level %d (decision %+v)", l, cost, hi, s.Level, d)
		}
		if b.Refill == 1 && hi != s.Level {
			t.Fatalf("%+v cost %d: MaxLevel %d, true level %d with r = 1", l, cost, hi, s.Level)
		}
		if b.Remaining(s.Level) != d.Remaining || b.ResetAfter(s.Level) != d.ResetAfter {
			t.Fatalf("%+v: Remaining/ResetAfter %d/%v, decision %+v", l, b.Remaining(s.Level), b.ResetAfter(s.Level), d)
		}
		// Later, nothing taken: Drain and RetryAfter agree with a Take.
		e := rng.Int64N(2 * (b.Capacity/b.Refill + 2))
		c := rng.Int64N(l.Burst + 1)
		_, later, _ := limiter.TakeBucket(l, s, now+e, c)
		drained := b.Drain(s.Level, e)
		if !later.Allowed && b.RetryAfter(drained, c) != later.RetryAfter || later.Allowed && b.RetryAfter(drained, c) != 0 {
			t.Fatalf("%+v after %d µs, cost %d: RetryAfter %v, engine %+v", l, e, c, b.RetryAfter(drained, c), later)
		}
		if b.RetryAfter(b.Drain(hi, e), c) < later.RetryAfter {
			t.Fatalf("%+v: the bound's RetryAfter is earlier than the engine's", l)
		}
	}
}

func TestDrainPastEmpty(t *testing.T) {
	b, _ := New(limiter.Limit{Algorithm: limiter.TokenBucket, Burst: 9, Rate: 3, Period: time.Second})
	if got := b.Drain(10, 1<<40); got != 0 {
		t.Fatalf("Drain past empty = %d", got)
	}
	if got := b.Drain(10, -5); got != 10 {
		t.Fatalf("Drain with negative time = %d", got)
	}
}
