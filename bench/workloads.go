package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	"golang.org/x/time/rate"

	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/limiter/memorystore"
	"github.com/costguard/costguard/limiter/overlimit"
	"github.com/costguard/costguard/limiter/redisstore"
)

// The concurrency levels of the all-admitted workloads; the scrape bot
// always runs maxCallers.
var callerCounts = []int{1, 8, maxCallers}

const maxCallers = 64

// The workloads' limits, the same for every contender. admittedLimit is
// so generous that every decision is admitted (10,000 keys share at most a
// few hundred thousand decisions a second), so the full refill arithmetic
// runs on every call; botLimit admits 10 a second to one key that
// maxCallers callers hammer.
var (
	admittedLimit = limiter.Limit{Algorithm: limiter.TokenBucket, Burst: 1_000_000, Rate: 1_000_000, Period: time.Second}
	botLimit      = limiter.Limit{Algorithm: limiter.TokenBucket, Burst: 10, Rate: 10, Period: time.Second}
)

// oursRedisName describes the stack newOursRedis builds, for the table.
const oursRedisName = "redisstore (coalescing on, the default) behind overlimit"

// newOursRedis builds costguard's production Redis stack on rdb: the Redis
// store, behind the local over-limit cache. Every key it writes starts
// with prefix + ":".
func newOursRedis(rdb redis.UniversalClient, prefix string) (limiter.Store, error) {
	rs, err := redisstore.New(rdb, redisstore.Config{Prefix: prefix})
	if err != nil {
		return nil, err
	}
	return overlimit.New(rs, overlimit.Config{})
}

func storeDecide(s limiter.Store, l limiter.Limit) decideFunc {
	return func(ctx context.Context, key string) (bool, error) {
		d, err := s.Take(ctx, key, l, 1)
		return d.Allowed, err
	}
}

func redisRateDecide(rl *redis_rate.Limiter, l limiter.Limit) decideFunc {
	lim := redis_rate.Limit{Rate: int(l.Rate), Burst: int(l.Burst), Period: l.Period}
	return func(ctx context.Context, key string) (bool, error) {
		r, err := rl.AllowN(ctx, key, lim, 1)
		if err != nil {
			return false, err
		}
		return r.Allowed > 0, nil
	}
}

// comparison is one workload's result: ours against theirs.
type comparison struct {
	workload   string
	callers    int
	ours, peer tally
	oursName   string
	peerName   string
	// bot marks the scrape-bot workload, where rejections are expected.
	bot bool
}

// ratio is ours ÷ theirs in decisions/s, or 0 when either is missing.
func (c comparison) ratio() float64 {
	if c.ours.rate() == 0 || c.peer.rate() == 0 {
		return 0
	}
	return c.ours.rate() / c.peer.rate()
}

// redisWorkloads runs the all-admitted workload at each concurrency and
// the scrape bot, costguard against redis_rate, each limiter on a client
// of its own.
func (e *env) redisWorkloads(ctx context.Context, rep *report) error {
	oursClient, oursTrips := newCountedClient(e.addr)
	peerClient, peerTrips := newCountedClient(e.addr)
	defer oursClient.Close()
	defer peerClient.Close()
	rec := new(scriptRecorder)
	oursClient.AddHook(rec)
	ours, err := newOursRedis(oursClient, e.prefix)
	if err != nil {
		return err
	}
	peer := redis_rate.NewLimiter(peerClient)
	replayClient := newClient(e.addr)
	defer replayClient.Close()

	// Our store prefixes keys itself; redis_rate adds "rate:" only.
	oursKeys, peerKeys := keyNames("", e.opts.keys), keyNames(e.prefix+":", e.opts.keys)
	admitted := []contender{
		{name: "costguard", decide: storeDecide(ours, admittedLimit), keys: oursKeys, rdb: e.admin, trips: oursTrips},
		{name: "redis_rate", decide: redisRateDecide(peer, admittedLimit), keys: peerKeys, rdb: e.admin, trips: peerTrips},
	}
	e.logf("warming up (connections, scripts, keys)")
	for _, c := range admitted {
		run(ctx, c, runSpec{callers: maxCallers, d: min(300*time.Millisecond, e.opts.duration)})
	}
	for _, n := range callerCounts {
		e.logf("Redis, all admitted, %d callers: %v per limiter", n, e.opts.duration)
		rec.start() // the store's first script calls of the workload
		t := interleave(ctx, admitted, runSpec{callers: n, timed: true}, e.opts.duration, e.opts.rounds)
		cmds := rec.stop()
		rep.redis = append(rep.redis, comparison{
			workload: fmt.Sprintf("all admitted, %d keys", e.opts.keys), callers: n,
			ours: t[0], peer: t[1], oursName: "costguard", peerName: "redis_rate",
		})
		e.logf("Redis ceiling: %d recorded script calls of the %d-caller workload, replayed pipelined: %v", len(cmds), n, e.opts.duration)
		rep.ceilings = append(rep.ceilings, replayCeiling(ctx, replayClient, n, cmds, e.opts.duration, e.opts.rounds))
	}

	bot := []contender{
		{name: "costguard", decide: storeDecide(ours, botLimit), keys: []string{"bot"}, rdb: e.admin, trips: oursTrips},
		{name: "redis_rate", decide: redisRateDecide(peer, botLimit), keys: []string{e.prefix + ":bot"}, rdb: e.admin, trips: peerTrips},
	}
	e.logf("Redis, scrape bot, %d callers on one key: %v per limiter", maxCallers, e.opts.duration)
	t := interleave(ctx, bot, runSpec{callers: maxCallers, timed: true}, e.opts.duration, e.opts.rounds)
	rep.redis = append(rep.redis, comparison{
		workload: fmt.Sprintf("scrape bot, 1 key, %d/s", botLimit.Rate), callers: maxCallers,
		ours: t[0], peer: t[1], oursName: "costguard", peerName: "redis_rate", bot: true,
	})
	if e.opts.cluster {
		return e.clusterWorkload(ctx, rep, admitted[0])
	}
	return nil
}

// clusterWorkload runs the store on a throwaway Cluster of clusterSize
// masters against the same store on the single server, both all admitted
// at maxCallers callers, interleaved.
func (e *env) clusterWorkload(ctx context.Context, rep *report, single contender) error {
	e.logf("starting a %d-master Cluster", clusterSize)
	cl, err := startCluster(ctx)
	if err != nil {
		return err
	}
	defer cl.Close()
	rdb := cl.client()
	defer rdb.Close()
	trips := new(tripCounter)
	rdb.AddHook(trips)
	ours, err := newOursRedis(rdb, e.prefix)
	if err != nil {
		return err
	}
	cc := contender{name: "costguard", decide: storeDecide(ours, admittedLimit), keys: single.keys, rdb: rdb, trips: trips}
	run(ctx, cc, runSpec{callers: maxCallers, d: min(300*time.Millisecond, e.opts.duration)}) // warm up
	e.logf("Redis Cluster, all admitted, %d callers: %v per deployment", maxCallers, e.opts.duration)
	t := interleave(ctx, []contender{cc, single}, runSpec{callers: maxCallers, timed: true}, e.opts.duration, e.opts.rounds)
	rep.cluster = &comparison{
		workload: fmt.Sprintf("all admitted, %d keys", e.opts.keys), callers: maxCallers,
		ours: t[0], peer: t[1], oursName: fmt.Sprintf("costguard, %d-master Cluster", clusterSize), peerName: "costguard, one server",
	}
	return nil
}

// xtimeKeyed is the usual way to key golang.org/x/time/rate: one Limiter
// per key in a map behind a mutex.
type xtimeKeyed struct {
	mu    sync.Mutex
	m     map[string]*rate.Limiter
	limit rate.Limit
	burst int
}

func (x *xtimeKeyed) decide(_ context.Context, key string) (bool, error) {
	x.mu.Lock()
	l, ok := x.m[key]
	if !ok {
		l = rate.NewLimiter(x.limit, x.burst)
		x.m[key] = l
	}
	x.mu.Unlock()
	return l.Allow(), nil
}

// memoryWorkloads runs the all-admitted workload in memory: the memory
// store against x/time/rate, with no Redis and no latency recording (two
// clock readings would cost as much as a decision).
func (e *env) memoryWorkloads(ctx context.Context, rep *report) error {
	ms, err := memorystore.New(memorystore.Config{})
	if err != nil {
		return err
	}
	defer ms.Close()
	xt := &xtimeKeyed{
		m:     make(map[string]*rate.Limiter),
		limit: rate.Every(admittedLimit.Period / time.Duration(admittedLimit.Rate)),
		burst: int(admittedLimit.Burst),
	}
	keys := keyNames("", e.opts.keys)
	cs := []contender{
		{name: "memorystore", decide: storeDecide(ms, admittedLimit), keys: keys},
		{name: "x/time/rate", decide: xt.decide, keys: keys},
	}
	for _, c := range cs { // first use of each key, out of the measurement
		run(ctx, c, runSpec{callers: 1, d: min(100*time.Millisecond, e.opts.duration)})
	}
	for _, n := range callerCounts {
		e.logf("memory, all admitted, %d callers: %v per limiter", n, e.opts.duration)
		t := interleave(ctx, cs, runSpec{callers: n}, e.opts.duration, e.opts.rounds)
		rep.memory = append(rep.memory, comparison{
			workload: fmt.Sprintf("all admitted, %d keys", e.opts.keys), callers: n,
			ours: t[0], peer: t[1], oursName: "memorystore", peerName: "x/time/rate",
		})
	}
	return nil
}
