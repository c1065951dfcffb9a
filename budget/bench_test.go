package budget_test

import (
	"log/slog"
	"testing"
	"time"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/limiter/memorystore"
	"github.com/costguard/costguard/limiter/stack"
)

// BenchmarkCharge measures one Charge on the memory store, by the budgets
// it decides: the bucket alone, with a quota, field limits counted by the
// principal and by the address, a route limit, a shaping limit with a
// lane, refusals that give back what was taken, and a refund after the
// charge. The budgets never run out, but for the refusals, whose first
// charge spends them.
//
//	go test -run '^$' -bench BenchmarkCharge -benchmem ./budget/
func BenchmarkCharge(b *testing.B) {
	// Refilled slower than spent, a budget never becomes whole again, which
	// the memory store would drop and then insert anew (an allocation).
	const per = 1000 * time.Hour
	big := budget.FieldLimit{Limit: 1e12, Per: per}
	byBoth := budget.FieldLimit{Limit: 1e12, Per: per, By: budget.ByBoth}
	shaping := budget.FieldLimit{Limit: 1e9, Per: time.Second, Algorithm: budget.LeakyBucketShaping}
	cfg := budget.Config{
		Plans: map[string]budget.Plan{
			"plain": {Burst: 1e12, Rate: 1e12, Per: per},
			"quota": {Burst: 1e12, Rate: 1e12, Per: per, Quota: &budget.Quota{Limit: 1e15, Per: time.Hour}},
			"small": {Burst: 10, Rate: 1, Per: time.Hour},
		},
		FieldLimits: map[string]budget.FieldLimit{
			"Query.a": big, "Query.b": big, "Query.c": big,
			"Query.both":  byBoth,
			"Query.shape": shaping,
			"Query.none":  {Limit: 1, Per: time.Hour, By: budget.ByIP},
		},
		RouteLimits: map[string]budget.FieldLimit{"GET /r": byBoth},
		Lanes:       []budget.LaneBudget{{Name: "bulk", Burst: 1e12, Rate: 1e12, Per: per}},
	}
	pol, err := budget.Compile(cfg)
	if err != nil {
		b.Fatal(err)
	}
	mem, err := memorystore.New(memorystore.Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer mem.Close()
	st, err := stack.New(stack.Config{Store: mem, OverflowKeys: 64, NoBreaker: true})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	eng, err := budget.NewEngine(st, pol, budget.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		b.Fatal(err)
	}
	plan := func(name string) *budget.Rule {
		r, _ := pol.Plan(name)
		return r
	}
	fields := func(coords ...string) []budget.FieldCount {
		fcs := make([]budget.FieldCount, len(coords))
		for i, c := range coords {
			fcs[i] = budget.FieldCount{Coordinate: c, Count: 1, Path: []string{"x"}}
		}
		return fcs
	}
	tests := []struct {
		name   string
		req    budget.Request
		want   budget.Verdict
		refund int64 // given back after the charge, as a response that cost less does
	}{
		{"bucket", budget.Request{Key: "k", Rule: plan("plain"), Cost: 1}, budget.Admitted, 0},
		{"bucket/unselected-limit", budget.Request{Key: "k", Rule: plan("plain"), Cost: 1, Fields: fields("Query.x")}, budget.Admitted, 0},
		{"quota", budget.Request{Key: "k", Rule: plan("quota"), Cost: 1}, budget.Admitted, 0},
		{"quota+field", budget.Request{Key: "k", Rule: plan("quota"), Cost: 1, Fields: fields("Query.a")}, budget.Admitted, 0},
		{"quota+field/refund", budget.Request{Key: "k", Rule: plan("quota"), Cost: 2, Fields: fields("Query.a")}, budget.Admitted, 1},
		{"quota+field+lane", budget.Request{Key: "k", Rule: plan("quota"), Cost: 1, Fields: fields("Query.a"), Lane: pol.Lane("bulk")}, budget.Admitted, 0},
		{"by-both", budget.Request{Key: "k", Addr: "ip:1", Rule: plan("quota"), Cost: 1, Fields: fields("Query.both")}, budget.Admitted, 0},
		{"seven-budgets", budget.Request{Key: "k", Addr: "ip:1", Rule: plan("quota"), Cost: 1, Fields: fields("Query.a", "Query.b", "Query.c"),
			Route: pol.Route("GET /r")}, budget.Admitted, 0},
		{"shaping+lane", budget.Request{Key: "k", Addr: "ip:1", Rule: plan("quota"), Cost: 1, Fields: fields("Query.shape", "Query.both"),
			Lane: pol.Lane("bulk")}, budget.Admitted, 0},
		{"refused/by-address", budget.Request{Key: "k", Addr: "ip:2", Rule: plan("quota"), Cost: 1, Fields: fields("Query.none")}, budget.FieldLimited, 0},
		{"refused/by-bucket", budget.Request{Key: "k", Addr: "ip:1", Rule: plan("small"), Cost: 10, Fields: fields("Query.both")}, budget.RateLimited, 0},
	}
	for _, tc := range tests {
		b.Run(tc.name, func(b *testing.B) {
			ctx := b.Context()
			eng.Charge(ctx, tc.req) // a refusal's budget is spent first
			b.ReportAllocs()
			for b.Loop() {
				o := eng.Charge(ctx, tc.req)
				if o.Verdict != tc.want {
					b.Fatalf("verdict %v, want %v", o.Verdict, tc.want)
				}
				if tc.refund > 0 {
					eng.Refund(ctx, tc.req, o, tc.refund)
				}
			}
		})
	}
}
