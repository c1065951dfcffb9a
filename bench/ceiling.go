package main

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis's own ceiling for the store's script: the script calls the store
// sent in a workload, recorded as sent (the same script, keys, batches and
// argument records), replayed back to back by a pipelined loop with no
// limiter in front. What the loop reaches is what this Redis, on this
// machine, can decide with those calls; the store's decisions/s divided by
// it is the fraction of the ceiling the store reaches.

// maxRecorded bounds the script calls a scriptRecorder keeps.
const maxRecorded = 4096

// The replay loop: ceilingWorkers goroutines, each with ceilingDepth script
// calls in one pipeline, so Redis always has the next call waiting.
const (
	ceilingWorkers = 2
	ceilingDepth   = 32
)

// scriptRecorder is a go-redis hook keeping copies of the first
// maxRecorded EVALSHA commands its client sends while it records.
type scriptRecorder struct {
	mu   sync.Mutex
	on   bool
	cmds [][]any
}

var _ redis.Hook = (*scriptRecorder)(nil)

// start drops what was recorded and records from now on.
func (r *scriptRecorder) start() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.on, r.cmds = true, nil
}

// stop ends recording and returns the calls recorded.
func (r *scriptRecorder) stop() [][]any {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.on = false
	return r.cmds
}

func (r *scriptRecorder) record(cmd redis.Cmder) {
	if cmd.Name() != "evalsha" {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.on && len(r.cmds) < maxRecorded {
		r.cmds = append(r.cmds, slices.Clone(cmd.Args()))
	}
}

func (r *scriptRecorder) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r *scriptRecorder) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		r.record(cmd)
		return next(ctx, cmd)
	}
}

func (r *scriptRecorder) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			r.record(c)
		}
		return next(ctx, cmds)
	}
}

// keysOf is the number of keys of a recorded EVALSHA (its third argument).
func keysOf(args []any) int64 {
	if len(args) > 2 {
		if n, ok := args[2].(int); ok {
			return int64(n)
		}
	}
	return 0
}

// ceiling is the replay of one workload's recorded script calls.
type ceiling struct {
	callers int
	calls   int   // distinct calls recorded (replayed in turn)
	keys    int64 // keys over those calls
	t       tally // decisions: keys decided by the calls that succeeded
}

// keysPerCall is the recorded calls' mean batch.
func (c ceiling) keysPerCall() float64 {
	if c.calls == 0 {
		return 0
	}
	return float64(c.keys) / float64(c.calls)
}

// replayCeiling sends cmds back to back, pipelined, for d in total over
// rounds rounds (the same split as the workloads'), and counts the keys
// the successful calls decided.
func replayCeiling(ctx context.Context, rdb redis.UniversalClient, callers int, cmds [][]any, d time.Duration, rounds int) ceiling {
	c := ceiling{callers: callers, calls: len(cmds), t: tally{scripts: 0, trips: -1}}
	for _, a := range cmds {
		c.keys += keysOf(a)
	}
	if len(cmds) == 0 {
		return c
	}
	for range rounds {
		if ctx.Err() != nil {
			break
		}
		c.t.add(replayRound(ctx, rdb, cmds, d/time.Duration(rounds)))
	}
	return c
}

func replayRound(ctx context.Context, rdb redis.UniversalClient, cmds [][]any, d time.Duration) tally {
	var (
		stop        atomic.Bool
		wg          sync.WaitGroup
		mu          sync.Mutex
		t           = tally{trips: -1}
		errs, calls int64
	)
	callCtx, cancel := context.WithTimeout(ctx, d+runGrace)
	defer cancel()
	timer := time.AfterFunc(d, func() { stop.Store(true) })
	defer timer.Stop()
	start := time.Now()
	for w := range ceilingWorkers {
		wg.Go(func() {
			var decided, failed, sent int64
			var firstErr error
			i := w * len(cmds) / ceilingWorkers
			pipe := rdb.Pipeline()
			for !stop.Load() && callCtx.Err() == nil {
				for range ceilingDepth {
					pipe.Do(callCtx, cmds[i%len(cmds)]...)
					i++
				}
				res, _ := pipe.Exec(callCtx)
				for _, r := range res {
					sent++
					if err := r.Err(); err != nil {
						failed++
						if firstErr == nil {
							firstErr = err
						}
						continue
					}
					decided += keysOf(r.Args())
				}
			}
			mu.Lock()
			defer mu.Unlock()
			t.decisions += decided
			t.admitted += decided
			errs += failed
			calls += sent
			if t.firstErr == nil {
				t.firstErr = firstErr
			}
		})
	}
	wg.Wait()
	t.elapsed, t.from, t.to = time.Since(start), start, time.Now()
	t.errors, t.scripts = errs, calls
	return t
}
