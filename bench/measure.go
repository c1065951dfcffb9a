package main

import (
	"context"
	"fmt"
	"math/bits"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// decideFunc makes one decision for key: whether it was admitted.
type decideFunc func(ctx context.Context, key string) (bool, error)

// contender is one limiter in a side-by-side comparison.
type contender struct {
	name   string
	decide decideFunc
	// keys are the keys its callers cycle through, each starting at its
	// own offset.
	keys []string
	// rdb, when set, is the Redis whose INFO commandstats is read around
	// each run to count the script calls its decisions cost.
	rdb redis.UniversalClient
	// trips, when set, counts the round trips of the contender's own
	// client.
	trips *tripCounter
}

// tally accumulates the runs of one contender on one workload.
type tally struct {
	decisions int64
	admitted  int64
	errors    int64
	firstErr  error
	elapsed   time.Duration
	// from and to bracket every decision of every run.
	from, to time.Time
	// scripts are the Redis script calls (see countScriptCalls) and trips
	// the client's round trips; -1 when not counted.
	scripts, trips int64
	lat            *histogram
	// perSlot counts admissions by when they returned, in runSpec.slot
	// steps from the start (recorded only when slot > 0).
	perSlot []int64
	// rounds are the decisions/s of each timed run added in, in order.
	rounds []float64
}

func (t *tally) add(r tally) {
	t.decisions += r.decisions
	t.admitted += r.admitted
	t.errors += r.errors
	if t.firstErr == nil {
		t.firstErr = r.firstErr
	}
	t.elapsed += r.elapsed
	if !r.from.IsZero() && (t.from.IsZero() || r.from.Before(t.from)) {
		t.from = r.from
	}
	if r.to.After(t.to) {
		t.to = r.to
	}
	t.scripts = addCount(t.scripts, r.scripts)
	t.trips = addCount(t.trips, r.trips)
	if r.lat != nil {
		if t.lat == nil {
			t.lat = new(histogram)
		}
		t.lat.merge(r.lat)
	}
	t.perSlot = addSlots(t.perSlot, r.perSlot, 0)
	switch {
	case len(r.rounds) > 0:
		t.rounds = append(t.rounds, r.rounds...)
	case r.elapsed > 0:
		t.rounds = append(t.rounds, r.rate())
	}
}

// addSlots adds src into dst from slot offset on, growing dst as needed.
func addSlots(dst, src []int64, offset int) []int64 {
	if n := offset + len(src); n > len(dst) {
		dst = append(dst, make([]int64, n-len(dst))...)
	}
	for i, v := range src {
		dst[offset+i] += v
	}
	return dst
}

// addCount adds two counts of which either may be -1 (not counted).
func addCount(a, b int64) int64 {
	if a < 0 || b < 0 {
		return -1
	}
	return a + b
}

// rate is decisions per second.
func (t *tally) rate() float64 {
	if t.elapsed <= 0 {
		return 0
	}
	return float64(t.decisions) / t.elapsed.Seconds()
}

// perDecision is n ÷ decisions, or -1 when n was not counted.
func (t *tally) perDecision(n int64) float64 {
	if n < 0 || t.decisions == 0 {
		return -1
	}
	return float64(n) / float64(t.decisions)
}

// runSpec is one timed run: callers goroutines, each cycling through the
// contender's keys, until d has passed or ctx is done.
type runSpec struct {
	callers int
	d       time.Duration
	// timed records each decision's latency (two clock readings per call:
	// right for Redis round trips, too heavy for in-memory limiters).
	timed bool
	// slot, when positive, records when each admission returned, counted
	// per slot since the start (at most maxSlots of them: later ones go
	// to the last).
	slot time.Duration
}

// maxSlots bounds tally.perSlot.
const maxSlots = 1 << 20

// runGrace is how long past its duration a run's calls may still take:
// then their context expires, so a stalled Redis cannot hang the run.
const runGrace = 5 * time.Second

// run measures c under spec. Every loop ends by itself: at the deadline, or
// when ctx is cancelled (then the calls in flight are cancelled too).
func run(ctx context.Context, c contender, spec runSpec) tally {
	t := tally{scripts: -1, trips: -1}
	var scriptsBefore, tripsBefore int64
	if c.rdb != nil {
		if n, err := countScriptCalls(ctx, c.rdb); err == nil {
			scriptsBefore, t.scripts = n, 0
		}
	}
	if c.trips != nil {
		tripsBefore, t.trips = c.trips.n.Load(), 0
	}
	callCtx, cancel := context.WithTimeout(ctx, spec.d+runGrace)
	defer cancel()

	var (
		stop    atomic.Bool
		wg      sync.WaitGroup
		results = make([]tally, spec.callers)
	)
	timer := time.AfterFunc(spec.d, func() { stop.Store(true) })
	defer timer.Stop()
	watch := context.AfterFunc(ctx, func() { stop.Store(true) })
	defer watch()

	start := time.Now()
	for w := range spec.callers {
		wg.Go(func() {
			r := &results[w]
			if spec.timed {
				r.lat = new(histogram)
			}
			i := w * 7919 // spread the callers over the keys
			for !stop.Load() {
				key := c.keys[i%len(c.keys)]
				i++
				var t0 time.Time
				if spec.timed {
					t0 = time.Now()
				}
				ok, err := c.decide(callCtx, key)
				if spec.timed {
					r.lat.record(time.Since(t0))
				}
				if err != nil {
					r.errors++
					if r.firstErr == nil {
						r.firstErr = err
					}
					continue
				}
				r.decisions++
				if ok {
					r.admitted++
					if spec.slot > 0 {
						at := min(int(time.Since(start)/spec.slot), maxSlots-1)
						if at >= len(r.perSlot) {
							r.perSlot = append(r.perSlot, make([]int64, at+1-len(r.perSlot))...)
						}
						r.perSlot[at]++
					}
				}
			}
		})
	}
	wg.Wait()
	end := time.Now()

	for _, r := range results {
		t.add(r)
	}
	t.elapsed, t.from, t.to = end.Sub(start), start, end
	if c.trips != nil {
		t.trips = c.trips.n.Load() - tripsBefore
	}
	if t.scripts >= 0 {
		if after, err := countScriptCalls(ctx, c.rdb); err == nil {
			t.scripts = max(0, after-scriptsBefore)
		} else {
			t.scripts = -1
		}
	}
	return t
}

// interleave runs each contender for d in total on spec, as rounds of
// d/rounds each, alternating which goes first, so that drift in the
// machine's load hits all of them alike.
func interleave(ctx context.Context, cs []contender, spec runSpec, d time.Duration, rounds int) []tally {
	out := make([]tally, len(cs))
	spec.d = d / time.Duration(rounds)
	for r := range rounds {
		for j := range cs {
			i := j
			if r%2 == 1 {
				i = len(cs) - 1 - j
			}
			if ctx.Err() != nil {
				return out
			}
			out[i].add(run(ctx, cs[i], spec))
		}
	}
	return out
}

// scriptCommands are the commands that run a script. Only they are
// counted: commandstats also counts every command a script calls, as if a
// client had sent it.
var scriptCommands = map[string]bool{"eval": true, "evalsha": true, "eval_ro": true, "evalsha_ro": true, "fcall": true, "fcall_ro": true}

// countScriptCalls sums the calls of scriptCommands in INFO commandstats.
// The count is server-wide: it is exact only when nothing else runs
// scripts on that Redis, as with the server the benchmark starts itself.
func countScriptCalls(ctx context.Context, rdb redis.UniversalClient) (int64, error) {
	if cc, ok := rdb.(*redis.ClusterClient); ok { // the sum over the masters
		var (
			mu    sync.Mutex
			total int64
		)
		err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			n, err := countScriptCalls(ctx, c)
			mu.Lock()
			defer mu.Unlock()
			total += n
			return err
		})
		return total, err
	}
	info, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return 0, fmt.Errorf("bench: INFO commandstats: %w", err)
	}
	return parseScriptCalls(info)
}

// parseScriptCalls reads lines like
// "cmdstat_evalsha:calls=12,usec=345,usec_per_call=28.75,...".
func parseScriptCalls(info string) (int64, error) {
	var total int64
	for line := range strings.SplitSeq(info, "\r\n") {
		rest, ok := strings.CutPrefix(line, "cmdstat_")
		if !ok {
			continue
		}
		name, stats, ok := strings.Cut(rest, ":")
		if !ok {
			return 0, fmt.Errorf("bench: malformed commandstats line %q", line)
		}
		if !scriptCommands[name] {
			continue
		}
		calls, _, _ := strings.Cut(stats, ",")
		v, ok := strings.CutPrefix(calls, "calls=")
		if !ok {
			return 0, fmt.Errorf("bench: malformed commandstats line %q", line)
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("bench: malformed commandstats line %q: %w", line, err)
		}
		total += n
	}
	return total, nil
}

// tripCounter is a go-redis hook counting a client's round trips: one per
// command sent alone, one per pipeline whatever its length.
type tripCounter struct{ n atomic.Int64 }

var _ redis.Hook = (*tripCounter)(nil)

func (c *tripCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *tripCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmd)
	}
}

func (c *tripCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmds)
	}
}

// histogram counts durations in logarithmic buckets, subBuckets per power
// of two (about 3% apart): fixed memory, whatever the run's length.
type histogram struct {
	counts [histBuckets]int64
	n      int64
}

const (
	subBits     = 5
	subBuckets  = 1 << subBits
	histBuckets = (64 - subBits + 1) * subBuckets // up to 2^64 − 1 ns
)

// bucketOf maps v ≥ 0 ns to its bucket: values below subBuckets have their
// own, above that the exponent picks a group and the next subBits bits of
// the mantissa the bucket inside it.
func bucketOf(v uint64) int {
	if v < subBuckets {
		return int(v)
	}
	e := bits.Len64(v) - 1 // ≥ subBits
	sub := (v >> (e - subBits)) & (subBuckets - 1)
	return (e-subBits+1)*subBuckets + int(sub)
}

// bucketLow is the smallest value of bucket b.
func bucketLow(b int) uint64 {
	if b < subBuckets {
		return uint64(b)
	}
	e := b/subBuckets + subBits - 1
	sub := uint64(b % subBuckets)
	return (1<<subBits | sub) << (e - subBits)
}

func (h *histogram) record(d time.Duration) {
	h.counts[bucketOf(uint64(max(d, 0)))]++
	h.n++
}

func (h *histogram) merge(o *histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
}

// quantile returns the q-quantile (0 < q ≤ 1) as the middle of its bucket,
// within 1.6% of the true value; zero for an empty histogram.
func (h *histogram) quantile(q float64) time.Duration {
	if h == nil || h.n == 0 {
		return 0
	}
	rank := int64(q*float64(h.n) + 0.5)
	rank = min(max(rank, 1), h.n)
	var seen int64
	for b, c := range h.counts {
		seen += c
		if seen >= rank {
			lo := bucketLow(b)
			hi := lo + 1
			if b+1 < histBuckets {
				hi = bucketLow(b + 1)
			}
			return time.Duration(lo + (hi-lo)/2)
		}
	}
	return 0
}
