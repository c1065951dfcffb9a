package budget_test

import (
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/internal/redistest"
	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/limiter/limitertest"
	"github.com/costguard/costguard/limiter/memorystore"
	"github.com/costguard/costguard/limiter/redisstore"
	"github.com/costguard/costguard/limiter/stack"
	"github.com/redis/go-redis/v9"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// routeStore opens a store deciding by clock, for one run of a test.
type routeStore struct {
	name string
	open func(t *testing.T, clock limiter.Clock) limiter.Store
}

// routeStores are the stores route limits are tested on: memory, and real
// Redis standalone and Cluster (skipped without redis-server, failing
// under CI=true).
func routeStores() []routeStore {
	redisOn := func(cluster bool) func(t *testing.T, clock limiter.Clock) limiter.Store {
		return func(t *testing.T, clock limiter.Clock) limiter.Store {
			var rdb redis.UniversalClient
			if cluster {
				rdb = redistest.SharedCluster(t).Client(t)
			} else {
				rdb = redistest.SharedServer(t).Client(t)
			}
			// One prefix per test: the servers are shared by the package.
			st, err := redisstore.New(rdb, redisstore.Config{Prefix: "route:" + t.Name() + ":", Clock: clock, ExpiryMargin: 24 * time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			return st
		}
	}
	return []routeStore{
		{"memory", func(t *testing.T, clock limiter.Clock) limiter.Store {
			mem, err := memorystore.New(memorystore.Config{Clock: clock})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { mem.Close() })
			return mem
		}},
		{"redis", redisOn(false)},
		{"cluster", redisOn(true)},
	}
}

// routeFixture is an Engine with route limits on one store.
type routeFixture struct {
	eng   *budget.Engine
	store limiter.Store
	clock *limitertest.FakeClock
}

func newRouteFixture(t *testing.T, s routeStore, cfg budget.Config) *routeFixture {
	t.Helper()
	clock := limitertest.NewFakeClock(time.Unix(1_800_000_000, 0))
	store := s.open(t, clock)
	return &routeFixture{eng: newEngine(t, cfg, store, clock), store: store, clock: clock}
}

// peek reads key's budget name under limit behind the engine's back.
func (f *routeFixture) peek(t *testing.T, key, name string, limit limiter.Limit) limiter.Decision {
	t.Helper()
	ds := make([]limiter.Decision, 1)
	if err := f.store.(limiter.MultiTaker).TakeAll(ctx, []limiter.Request{{Key: key, Name: name, Limit: limit}}, ds); err != nil {
		t.Fatal(err)
	}
	return ds[0]
}

func (f *routeFixture) bucket(t *testing.T, key string) int64 {
	t.Helper()
	r, _ := f.eng.Policy().Plan("free")
	return f.peek(t, key, "", r.Limit()).Remaining
}

// routePlans: a bucket of 100 that refills a point an hour.
func routePlans() map[string]budget.Plan {
	return map[string]budget.Plan{"free": {Burst: 100, Rate: 1, Per: time.Hour}}
}

const login = "POST /login"

// Each algorithm of a route limit admits what it should, refuses the rest
// with RouteLimited and an honest Retry-After, and is decided all or
// nothing with the plan's bucket: a refusal by the route leaves the bucket
// as it was, and a refusal by the bucket leaves the route as it was.
func TestRouteLimitAlgorithms(t *testing.T) {
	tests := []struct {
		alg      budget.LimitAlgorithm
		maxDelay time.Duration
		delays   []time.Duration // of the admitted requests, in order
	}{
		{budget.TokenBucket, 0, []time.Duration{0, 0, 0}},
		{budget.LeakyBucketPolicing, 0, []time.Duration{0, 0, 0}},
		{budget.FixedWindow, 0, []time.Duration{0, 0, 0}},
		{budget.SlidingLog, 0, []time.Duration{0, 0, 0}},
		{budget.SlidingCounter, 0, []time.Duration{0, 0, 0}},
		// 3 a minute depart 20s apart; a queue of 40s holds two ahead.
		{budget.LeakyBucketShaping, 40 * time.Second, []time.Duration{0, 20 * time.Second, 40 * time.Second}},
	}
	for _, s := range routeStores() {
		t.Run(s.name, func(t *testing.T) {
			for _, tc := range tests {
				t.Run(string(tc.alg), func(t *testing.T) {
					f := newRouteFixture(t, s, budget.Config{
						Plans:       routePlans(),
						RouteLimits: map[string]budget.FieldLimit{login: {Limit: 3, Per: time.Minute, Algorithm: tc.alg, MaxDelay: tc.maxDelay}},
					})
					free, _ := f.eng.Policy().Plan("free")
					rt := f.eng.Policy().Route(login)
					key := "user:" + string(tc.alg)
					charge := func(cost int64) budget.Outcome {
						return f.eng.Charge(ctx, budget.Request{Key: key, Rule: free, Cost: cost, Route: rt})
					}
					for i, want := range tc.delays {
						o := charge(5)
						if o.Verdict != budget.Admitted || o.Delay != want {
							t.Fatalf("request %d: %v, delay %v; want admitted after %v", i+1, o.Verdict, o.Delay, want)
						}
					}
					before := f.bucket(t, key)
					o := charge(5)
					if o.Verdict != budget.RouteLimited || o.RetryAfter <= 0 || o.ByLimit == nil || o.ByLimit.Route != rt || o.Delay != 0 {
						t.Fatalf("request 4: %+v; want RouteLimited with a Retry-After", o)
					}
					if got := o.Verdict.Answer(); got.Code != budget.CodeRouteRateLimited || got.RESTStatus != 429 || got.RESTCode != "route_rate_limited" {
						t.Errorf("answer %+v", got)
					}
					if after := f.bucket(t, key); after != before || after != 100-15 {
						t.Errorf("the route's refusal left the bucket at %d, was %d; want 85", after, before)
					}
					// Retry-After is honest: the route admits again then.
					f.clock.Advance(time.Duration(o.RetryAfter) * time.Second)
					if o := charge(5); o.Verdict != budget.Admitted {
						t.Errorf("after Retry-After %ds: %v", o.RetryAfter, o.Verdict)
					}

					// The bucket refuses: the route is left as it was.
					other := key + ":poor"
					if o := charge2(f, other, free, rt, 100); o.Verdict != budget.Admitted {
						t.Fatalf("a first request of 100: %v", o.Verdict)
					}
					was := f.peek(t, other, "route:"+login, rt.Limit)
					if o := charge2(f, other, free, rt, 1); o.Verdict != budget.RateLimited {
						t.Fatalf("the bucket empty: %v", o.Verdict)
					}
					if now := f.peek(t, other, "route:"+login, rt.Limit); now.Remaining != was.Remaining {
						t.Errorf("the bucket's refusal moved the route limit from %d to %d", was.Remaining, now.Remaining)
					}
				})
			}
		})
	}
}

func charge2(f *routeFixture, key string, r *budget.Rule, rt *budget.RouteRule, cost int64) budget.Outcome {
	return f.eng.Charge(ctx, budget.Request{Key: key, Rule: r, Cost: cost, Route: rt})
}

// A route limit counts by principal, by client address, or both; an
// anonymous principal, keyed by its address, is counted once. A refusal
// by one count leaves the other as it was.
func TestRouteLimitBy(t *testing.T) {
	for _, s := range routeStores() {
		t.Run(s.name, func(t *testing.T) {
			for _, alg := range []budget.LimitAlgorithm{budget.TokenBucket, budget.SlidingLog, budget.SlidingCounter, budget.FixedWindow} {
				t.Run(string(alg), func(t *testing.T) {
					f := newRouteFixture(t, s, budget.Config{
						Plans: routePlans(),
						RouteLimits: map[string]budget.FieldLimit{
							"ip":        {Limit: 2, Per: time.Minute, Algorithm: alg, By: budget.ByIP},
							"both":      {Limit: 2, Per: time.Minute, Algorithm: alg, By: budget.ByBoth},
							"principal": {Limit: 2, Per: time.Minute, Algorithm: alg},
						},
					})
					pol := f.eng.Policy()
					free, _ := pol.Plan("free")
					type step struct {
						route, key, addr string
						want             budget.Verdict
					}
					steps := []step{
						{"principal", "user:a", "ip:1", budget.Admitted},
						{"principal", "user:a", "ip:2", budget.Admitted},
						{"principal", "user:a", "ip:3", budget.RouteLimited},
						{"principal", "user:b", "ip:1", budget.Admitted},

						{"ip", "user:a", "ip:1", budget.Admitted},
						{"ip", "user:b", "ip:1", budget.Admitted},
						{"ip", "user:c", "ip:1", budget.RouteLimited},
						{"ip", "user:c", "ip:2", budget.Admitted},

						{"both", "user:a", "ip:1", budget.Admitted},
						{"both", "user:a", "ip:1", budget.Admitted},
						{"both", "user:a", "ip:2", budget.RouteLimited}, // the principal's count
						{"both", "user:b", "ip:1", budget.RouteLimited}, // the address's count
						{"both", "user:b", "ip:2", budget.Admitted},     // neither moved above
						{"both", "user:b", "ip:2", budget.Admitted},
						{"both", "ip:9", "ip:9", budget.Admitted}, // anonymous: counted once
						{"both", "ip:9", "ip:9", budget.Admitted},
						{"both", "ip:9", "ip:9", budget.RouteLimited},
					}
					for i, st := range steps {
						bucket := f.bucket(t, st.key)
						o := f.eng.Charge(ctx, budget.Request{Key: st.key, Addr: st.addr, Rule: free, Cost: 1, Route: pol.Route(st.route)})
						if o.Verdict != st.want {
							t.Fatalf("step %d %+v: %v", i, st, o.Verdict)
						}
						if o.Verdict != budget.Admitted {
							if after := f.bucket(t, st.key); after != bucket {
								t.Errorf("step %d: a refusal moved the bucket from %d to %d", i, bucket, after)
							}
						}
					}
				})
			}
		})
	}
}

// A shaping turn cannot be given back, so it is taken last: whatever else
// refuses (the principal's bucket while the shaping limit counts by
// address, a lane's budget), the shaping limit is left as it was, and
// when the shaping limit refuses, what was taken before it is given back.
// A request admitted waits at most MaxDelay.
func TestRouteLimitShapingAllOrNothing(t *testing.T) {
	for _, s := range routeStores() {
		t.Run(s.name, func(t *testing.T) {
			f := newRouteFixture(t, s, budget.Config{
				Plans: routePlans(),
				RouteLimits: map[string]budget.FieldLimit{
					// 10 a second, 100ms apart; at most 250ms in the queue.
					"shape": {Limit: 10, Per: time.Second, Algorithm: budget.LeakyBucketShaping, By: budget.ByIP, MaxDelay: 250 * time.Millisecond},
				},
				Lanes: []budget.LaneBudget{{Name: "slow", Burst: 10, Rate: 1, Per: time.Hour}},
			})
			pol := f.eng.Policy()
			free, _ := pol.Plan("free")
			rt := pol.Route("shape")
			shaped := func(addr string) limiter.Decision { return f.peek(t, addr, "route:shape", rt.Limit) }
			req := budget.Request{Key: "user:a", Addr: "ip:1", Rule: free, Route: rt}

			// The bucket refuses (cost above what is left): the turn is not taken.
			req.Cost = 100
			if o := f.eng.Charge(ctx, req); o.Verdict != budget.Admitted || o.Delay != 0 {
				t.Fatalf("first: %v %v", o.Verdict, o.Delay)
			}
			was := shaped("ip:1")
			req.Cost = 1
			if o := f.eng.Charge(ctx, req); o.Verdict != budget.RateLimited {
				t.Fatalf("bucket empty: %v", o.Verdict)
			}
			if now := shaped("ip:1"); now != was {
				t.Errorf("the bucket's refusal took a shaping turn: %+v, was %+v", now, was)
			}

			// Shaping admits with growing delays up to MaxDelay, then
			// refuses; the bucket pays only the admitted.
			req.Key = "user:b"
			var delays []time.Duration
			for {
				o := f.eng.Charge(ctx, req)
				if o.Verdict != budget.Admitted {
					if o.Verdict != budget.RouteLimited {
						t.Fatalf("after %d: %v", len(delays), o.Verdict)
					}
					break
				}
				if o.Delay > 250*time.Millisecond {
					t.Fatalf("delay %v beyond MaxDelay", o.Delay)
				}
				delays = append(delays, o.Delay)
			}
			// The first waits 100ms (the turn taken above), the others 100ms more each.
			if fmt.Sprint(delays) != "[100ms 200ms]" {
				t.Errorf("delays %v; want [100ms 200ms]", delays)
			}
			if got := f.bucket(t, "user:b"); got != 100-int64(len(delays)) {
				t.Errorf("bucket %d after %d admitted", got, len(delays))
			}

			// The lane refuses: the turn is not taken either.
			f.clock.Advance(time.Second)
			ln := pol.Lane("slow")
			req = budget.Request{Key: "user:c", Addr: "ip:2", Rule: free, Lane: ln, Route: rt, Cost: 10}
			if o := f.eng.Charge(ctx, req); o.Verdict != budget.Admitted {
				t.Fatalf("lane first: %v", o.Verdict)
			}
			was = shaped("ip:2")
			bucket := f.bucket(t, "user:c")
			if o := f.eng.Charge(ctx, req); o.Verdict != budget.RateLimited || o.ByLane != ln {
				t.Fatalf("lane empty: %v by %v", o.Verdict, o.ByLane)
			}
			if now := shaped("ip:2"); now != was {
				t.Errorf("the lane's refusal took a shaping turn: %+v, was %+v", now, was)
			}
			if now := f.bucket(t, "user:c"); now != bucket {
				t.Errorf("the lane's refusal moved the bucket from %d to %d", bucket, now)
			}
			// The shaping limit refuses: the lane and the bucket are given back.
			req = budget.Request{Key: "user:d", Addr: "ip:1", Rule: free, Lane: ln, Route: rt, Cost: 2}
			for range 3 {
				if o := f.eng.Charge(ctx, req); o.Verdict != budget.Admitted {
					t.Fatalf("fill: %v", o.Verdict)
				}
			}
			bucket = f.bucket(t, "user:d")
			lane := f.peek(t, "lane:slow:user:d", "", ln.Limit()).Remaining
			if o := f.eng.Charge(ctx, req); o.Verdict != budget.RouteLimited {
				t.Fatalf("queue full: %v", o.Verdict)
			}
			if now := f.bucket(t, "user:d"); now != bucket {
				t.Errorf("the shaping refusal moved the bucket from %d to %d", bucket, now)
			}
			if now := f.peek(t, "lane:slow:user:d", "", ln.Limit()).Remaining; now != lane {
				t.Errorf("the shaping refusal moved the lane from %d to %d", lane, now)
			}
		})
	}
}

// Compile refuses route and field limits it cannot decide.
func TestCompileRouteLimits(t *testing.T) {
	ok := budget.FieldLimit{Limit: 5, Per: 15 * time.Minute, Algorithm: budget.SlidingLog, By: budget.ByIP}
	shape := budget.FieldLimit{Limit: 10, Per: time.Second, Algorithm: budget.LeakyBucketShaping}
	tests := map[string]struct {
		routes, fields map[string]budget.FieldLimit
		path           string
	}{
		"bad algorithm":       {routes: map[string]budget.FieldLimit{login: {Limit: 1, Per: time.Second, Algorithm: "gcra"}}, path: "route_limits/" + login + "/algorithm"},
		"bad by":              {routes: map[string]budget.FieldLimit{login: {Limit: 1, Per: time.Second, By: "user"}}, path: "route_limits/" + login + "/by"},
		"zero limit":          {routes: map[string]budget.FieldLimit{login: {Per: time.Second}}, path: "route_limits/" + login + "/limit"},
		"bad route":           {routes: map[string]budget.FieldLimit{"\n": ok}, path: "route_limits/\n"},
		"log too long":        {routes: map[string]budget.FieldLimit{login: {Limit: limiter.MaxLogRate + 1, Per: time.Hour, Algorithm: budget.SlidingLog}}, path: "route_limits/" + login},
		"max_delay unshaped":  {routes: map[string]budget.FieldLimit{login: {Limit: 1, Per: time.Second, MaxDelay: time.Second}}, path: "route_limits/" + login + "/max_delay"},
		"max_delay too long":  {routes: map[string]budget.FieldLimit{login: {Limit: 1, Per: time.Second, Algorithm: budget.LeakyBucketShaping, MaxDelay: time.Hour}}, path: "route_limits/" + login + "/max_delay"},
		"max_delay negative":  {routes: map[string]budget.FieldLimit{login: {Limit: 1, Per: time.Second, Algorithm: budget.LeakyBucketShaping, MaxDelay: -time.Second}}, path: "route_limits/" + login + "/max_delay"},
		"shaping by both":     {routes: map[string]budget.FieldLimit{login: {Limit: 1, Per: time.Second, Algorithm: budget.LeakyBucketShaping, By: budget.ByBoth}}, path: "route_limits/" + login + "/by"},
		"shaping field both":  {fields: map[string]budget.FieldLimit{"Query.a": {Limit: 1, Per: time.Second, Algorithm: budget.LeakyBucketShaping, By: budget.ByBoth}}, path: "field_limits/Query.a/by"},
		"shaping keys differ": {fields: map[string]budget.FieldLimit{"Query.a": shape}, routes: map[string]budget.FieldLimit{login: {Limit: 1, Per: time.Second, Algorithm: budget.LeakyBucketShaping, By: budget.ByIP}}, path: "route_limits/" + login + "/by"},
	}
	for name, tc := range tests {
		_, err := budget.Compile(budget.Config{Plans: routePlans(), RouteLimits: tc.routes, FieldLimits: tc.fields})
		var ce *budget.ConfigError
		if !errors.Is(err, budget.ErrInvalidConfig) || !errors.As(err, &ce) {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if got := fmt.Sprint(joinPath(ce.Path)); got != tc.path {
			t.Errorf("%s: path %q; want %q (%v)", name, got, tc.path, err)
		}
	}
	pol, err := budget.Compile(budget.Config{Plans: routePlans(), RouteLimits: map[string]budget.FieldLimit{login: ok, "GET /slow": shape}})
	if err != nil {
		t.Fatal(err)
	}
	if got := pol.RouteNames(); fmt.Sprint(got) != "[GET /slow POST /login]" {
		t.Errorf("RouteNames %v", got)
	}
	if l := pol.Route(login).Limit; l.Algorithm != limiter.SlidingLog || l.Rate != 5 || l.Period != 15*time.Minute {
		t.Errorf("sliding_log limit %+v", l)
	}
	// 10 a second, DefaultMaxDelay of 1s: 10 ahead and the request itself.
	if l := pol.Route("GET /slow").Limit; l.Algorithm != limiter.LeakyBucketShaping || l.Burst != 11 || l.Rate != 10 {
		t.Errorf("shaping limit %+v", l)
	}
	if !pol.AnyByIP() {
		t.Error("a route limit by ip: AnyByIP false")
	}
}

func joinPath(p []string) string {
	s := ""
	for i, k := range p {
		if i > 0 {
			s += "/"
		}
		s += k
	}
	return s
}

// A field limit takes an algorithm and counts by both too: each alias
// counts, in a fixed window, for the principal and for the address.
func TestFieldLimitAlgorithmByBoth(t *testing.T) {
	for _, s := range routeStores() {
		t.Run(s.name, func(t *testing.T) {
			f := newRouteFixture(t, s, budget.Config{
				Plans:       routePlans(),
				FieldLimits: map[string]budget.FieldLimit{"Mutation.login": {Limit: 3, Per: time.Hour, Algorithm: budget.FixedWindow, By: budget.ByBoth}},
			})
			free, _ := f.eng.Policy().Plan("free")
			charge := func(key, addr string, count int64) budget.Outcome {
				return f.eng.Charge(ctx, budget.Request{Key: key, Addr: addr, Rule: free, Cost: 1,
					Fields: []budget.FieldCount{{Coordinate: "Mutation.login", Count: count}}})
			}
			if o := charge("user:a", "ip:1", 2); o.Verdict != budget.Admitted || len(o.Limits) != 2 {
				t.Fatalf("two selections: %v, %d limits", o.Verdict, len(o.Limits))
			}
			if o := charge("user:a", "ip:2", 2); o.Verdict != budget.FieldLimited || o.ByLimit.ByAddr {
				t.Fatalf("the principal's third and fourth: %v (by address %v)", o.Verdict, o.ByLimit != nil && o.ByLimit.ByAddr)
			}
			if o := charge("user:b", "ip:1", 2); o.Verdict != budget.FieldLimited || !o.ByLimit.ByAddr {
				t.Fatalf("the address's third and fourth: %v", o.Verdict)
			}
			if o := charge("user:b", "ip:2", 3); o.Verdict != budget.Admitted {
				t.Fatalf("neither count moved by the refusals: %v", o.Verdict)
			}
			if o := charge("user:c", "ip:3", 4); o.Verdict != budget.FieldLimited || !o.Never {
				t.Fatalf("more selections than the limit: %v never %v", o.Verdict, o.Never)
			}
		})
	}
}

// A plan served from split-budget leases takes a route limit too: the
// route limit is decided in the store, apart from the lease, and given
// back when the bucket refuses; a shaping one is decided after the
// bucket, which is given back when it refuses.
func TestRouteLimitSplitBudget(t *testing.T) {
	for _, fl := range []budget.FieldLimit{
		{Limit: 3, Per: time.Hour, Algorithm: budget.SlidingLog},
		{Limit: 3, Per: time.Minute, Algorithm: budget.LeakyBucketShaping, MaxDelay: 40 * time.Second}, // 3 at once: now, in 20s, in 40s
	} {
		t.Run(string(fl.Algorithm), func(t *testing.T) {
			clock := limitertest.NewFakeClock(time.Unix(1_800_000_000, 0))
			mem, err := memorystore.New(memorystore.Config{Clock: clock})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { mem.Close() })
			pol, err := budget.Compile(budget.Config{
				Plans:       map[string]budget.Plan{"ux": {Burst: 10, Rate: 1, Per: time.Hour, SplitBudget: true}},
				RouteLimits: map[string]budget.FieldLimit{login: fl},
			})
			if err != nil {
				t.Fatal(err)
			}
			st, err := stack.New(stack.Config{Store: mem, OverflowKeys: 64, Clock: clock, SplitBudget: true, NoBreaker: true})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			eng, err := budget.NewEngine(st, pol, budget.WithClock(clock), budget.WithLogger(slog.New(slog.DiscardHandler)))
			if err != nil {
				t.Fatal(err)
			}
			ux, _ := pol.Plan("ux")
			rt := pol.Route(login)
			route := func(key string) limiter.Decision {
				ds := make([]limiter.Decision, 1)
				if err := mem.TakeAll(ctx, []limiter.Request{{Key: key, Name: "route:" + login, Limit: rt.Limit}}, ds); err != nil {
					t.Fatal(err)
				}
				return ds[0]
			}
			charge := func(key string, cost int64) budget.Outcome {
				return eng.Charge(ctx, budget.Request{Key: key, Rule: ux, Cost: cost, Route: rt})
			}
			// The bucket refuses: the route limit keeps its count.
			if o := charge("user:a", 9); o.Verdict != budget.Admitted {
				t.Fatalf("first: %v", o.Verdict)
			}
			was := route("user:a")
			if o := charge("user:a", 5); o.Verdict != budget.RateLimited {
				t.Fatalf("bucket short: %v", o.Verdict)
			}
			if now := route("user:a"); now != was {
				t.Errorf("the bucket's refusal moved the route limit: %+v, was %+v", now, was)
			}
			// The route refuses the fourth: the bucket keeps its points.
			for i := range 3 {
				if o := charge("user:b", 1); o.Verdict != budget.Admitted {
					t.Fatalf("login %d: %v", i+1, o.Verdict)
				}
			}
			before := eng.Peek(ctx, budget.Request{Key: "user:b", Rule: ux}).Decision.Remaining
			if o := charge("user:b", 1); o.Verdict != budget.RouteLimited || o.RetryAfter <= 0 {
				t.Fatalf("login 4: %v", o.Verdict)
			}
			if after := eng.Peek(ctx, budget.Request{Key: "user:b", Rule: ux}).Decision.Remaining; after != before {
				t.Errorf("the route's refusal moved the bucket from %d to %d", before, after)
			}
		})
	}
}

// When the address's budgets are decided last (they hold a shaping turn),
// a refund of unused cost still goes to the principal's bucket.
func TestShapingByAddrRefundsThePrincipal(t *testing.T) {
	for _, s := range routeStores() {
		t.Run(s.name, func(t *testing.T) {
			f := newRouteFixture(t, s, budget.Config{
				Plans:       routePlans(),
				FieldLimits: map[string]budget.FieldLimit{"Mutation.send": {Limit: 10, Per: time.Second, Algorithm: budget.LeakyBucketShaping, By: budget.ByIP}},
			})
			free, _ := f.eng.Policy().Plan("free")
			req := budget.Request{Key: "user:a", Addr: "ip:1", Rule: free, Cost: 30,
				Fields: []budget.FieldCount{{Coordinate: "Mutation.send", Count: 1}}}
			o := f.eng.Charge(ctx, req)
			if o.Verdict != budget.Admitted {
				t.Fatal(o.Verdict)
			}
			o = f.eng.Settle(ctx, req, o, 10, true, "send")
			if o.Refunded != 20 {
				t.Fatalf("refunded %d", o.Refunded)
			}
			if got := f.bucket(t, "user:a"); got != 90 {
				t.Errorf("the principal's bucket holds %d; want 90 (30 paid, 20 back)", got)
			}
			if got := f.bucket(t, "ip:1"); got != 100 {
				t.Errorf("the address's plain bucket holds %d; want 100 (untouched)", got)
			}
		})
	}
}
