package middleware_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/handler"
	"github.com/99designs/gqlgen/graphql/handler/transport"
	"github.com/vektah/gqlparser/v2"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/limiter/breaker"
	"github.com/costguard/costguard/limiter/guard"
	"github.com/costguard/costguard/limiter/memorystore"
	"github.com/costguard/costguard/middleware"
)

// The test schema answers user with null: the operation priced 61 actually
// costs nothing but the minimum, and 60 points come back before the headers
// are written.
func TestRefundBeforeHeaders(t *testing.T) {
	cfg := withRefunds(testConfig(t, newClock()))
	rec := &recorder{}
	cfg.Observer = rec
	lim := newLimiter(t, cfg)
	h := graphQLServer(lim, newTestSchema())

	w, resp := query(t, h, query61, bearer(aliceKey))
	if w.Code != http.StatusOK {
		t.Fatalf("status %d", w.Code)
	}
	c := resp.Extensions.Cost
	if c.RequestedQueryCost != 61 || c.ActualQueryCost == nil || *c.ActualQueryCost != 1 || *c.ThrottleStatus.CurrentlyAvailable != 99 {
		t.Errorf("extensions.cost %+v (actual %v)", c, c.ActualQueryCost)
	}
	if got := w.Header().Get(middleware.HeaderXRateLimitRemaining); got != "99" {
		t.Errorf("X-RateLimit-Remaining %s, want 99", got)
	}
	if e := rec.take(); len(e) != 1 || !e[0].HasActualCost || e[0].ActualCost != 1 || e[0].Refunded != 60 || e[0].Charged != 61 {
		t.Errorf("events %+v", e)
	}

	// A mutation keeps its base cost: createIssue returns its issue, 11.
	w, resp = query(t, h, mutation11, bearer(aliceKey))
	if *resp.Extensions.Cost.ActualQueryCost != 11 || w.Header().Get(middleware.HeaderXRateLimitRemaining) != "88" {
		t.Errorf("mutation: actual %d, remaining %s", *resp.Extensions.Cost.ActualQueryCost, w.Header().Get(middleware.HeaderXRateLimitRemaining))
	}
	// A refused operation has no actual cost.
	for range 2 {
		query(t, h, query61, bearer(aliceKey))
	}
	cfg2 := withRefunds(testConfig(t, newClock()))
	cfg2.Plans = map[string]budget.Plan{"free": {Burst: 61, Rate: 1, Per: time.Hour}, "anon": testPlans()["anon"]}
	lim2 := newLimiter(t, cfg2)
	h2 := graphQLServer(lim2, newTestSchema())
	query(t, h2, mutation11, bearer(aliceKey))
	if w, resp := query(t, h2, query61, bearer(aliceKey)); w.Code != http.StatusTooManyRequests || resp.Extensions.Cost.ActualQueryCost != nil {
		t.Errorf("refused: status %d, actual %v", w.Code, resp.Extensions.Cost.ActualQueryCost)
	}
}

// Plan.DisableRefund keeps the requested cost; the actual cost is still
// reported.
func TestRefundDisabled(t *testing.T) {
	cfg := withRefunds(testConfig(t, newClock()))
	p := cfg.Plans["free"]
	p.DisableRefund = true
	cfg.Plans["free"] = p
	h := graphQLServer(newLimiter(t, cfg), newTestSchema())
	w, resp := query(t, h, query61, bearer(aliceKey))
	if *resp.Extensions.Cost.ActualQueryCost != 1 || w.Header().Get(middleware.HeaderXRateLimitRemaining) != "39" {
		t.Errorf("actual %d, remaining %s", *resp.Extensions.Cost.ActualQueryCost, w.Header().Get(middleware.HeaderXRateLimitRemaining))
	}
}

// A response with errors keeps its requested cost: the fields that failed
// are null, but their resolvers' work was done.
func TestNoRefundWhenTheResponseHasErrors(t *testing.T) {
	cfg := withRefunds(testConfig(t, newClock()))
	lim := newLimiter(t, cfg)
	s := newTestSchema()
	exec := s.executable().(*graphql.ExecutableSchemaMock)
	exec.ExecFunc = func(context.Context) graphql.ResponseHandler {
		return graphql.OneShot(&graphql.Response{Data: json.RawMessage(`{"user":null}`), Errors: gqlerror.List{gqlerror.Errorf("backend down")}})
	}
	srv := handler.New(exec)
	srv.AddTransport(transport.POST{})
	h := lim.Handler(srv)
	w, resp := query(t, h, query61, bearer(aliceKey))
	if resp.Extensions.Cost.ActualQueryCost == nil || *resp.Extensions.Cost.ActualQueryCost != 1 || w.Header().Get(middleware.HeaderXRateLimitRemaining) != "39" {
		t.Errorf("actual %v, remaining %s", resp.Extensions.Cost.ActualQueryCost, w.Header().Get(middleware.HeaderXRateLimitRemaining))
	}
}

// refundCounter is a toggleStore that counts the Refund calls reaching it.
type refundCounter struct {
	*toggleStore
	refunds atomic.Int64
}

func (s *refundCounter) Refund(ctx context.Context, key string, l limiter.Limit, amount int64) (limiter.Decision, error) {
	s.refunds.Add(1)
	return s.toggleStore.Refund(ctx, key, l, amount)
}

// Refunds are skipped while the breaker is open: alice's operation priced
// 61 is debited by the store, then, while it executes, the store fails and
// Failures REST calls of bob's open the breaker. Her 60 unused points are
// not given back (they return by refill), and no Refund reaches the store.
// With the breaker still closed the same refund does reach it.
func TestNoRefundWhileBreakerOpen(t *testing.T) {
	for _, tc := range []struct {
		name        string
		breakDuring bool // the store fails and the breaker opens while alice's operation executes
		refunds     int64
		remaining   string
		refunded    int64
		breaker     guard.BreakerState
	}{
		{"closed: refunded", false, 1, "99", 60, guard.BreakerClosed},
		{"open: skipped", true, 0, "39", 0, guard.BreakerOpen},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := withRefunds(testConfig(t, newClock()))
			store := &refundCounter{toggleStore: &toggleStore{Store: cfg.Store.(*memorystore.Store)}}
			cfg.Store = store
			cfg.Breaker = breaker.Config{Failures: 3, CoolDown: time.Minute}
			rec := &recorder{}
			cfg.Observer = rec
			lim := newLimiter(t, cfg)
			rest := lim.REST(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))

			exec := newTestSchema().executable().(*graphql.ExecutableSchemaMock)
			run := exec.ExecFunc
			exec.ExecFunc = func(ctx context.Context) graphql.ResponseHandler {
				if tc.breakDuring {
					store.failing.Store(true)
					for range 3 {
						do(t, rest, request{method: "GET", path: "/api/free", header: bearer(bobKey)})
					}
				}
				return run(ctx)
			}
			srv := handler.New(exec)
			srv.AddTransport(transport.POST{})
			h := lim.Handler(srv)

			w, resp := query(t, h, query61, bearer(aliceKey))
			if w.Code != http.StatusOK {
				t.Fatalf("status %d", w.Code)
			}
			if n := store.failedCalls.Load(); tc.breakDuring && n != 3 {
				t.Errorf("%d failed store calls, want 3", n)
			}
			if got := store.refunds.Load(); got != tc.refunds {
				t.Errorf("%d Refund calls reached the store, want %d", got, tc.refunds)
			}
			if c := resp.Extensions.Cost; c.ActualQueryCost == nil || *c.ActualQueryCost != 1 {
				t.Errorf("actual %v, want 1 (reported either way)", c.ActualQueryCost)
			}
			if got := w.Header().Get(middleware.HeaderXRateLimitRemaining); got != tc.remaining {
				t.Errorf("X-RateLimit-Remaining %s, want %s", got, tc.remaining)
			}
			evs := rec.take()
			e := evs[len(evs)-1] // alice's, after bob's
			if e.Charged != 61 || e.Refunded != tc.refunded {
				t.Errorf("alice's event: charged %d refunded %d, want 61 and %d", e.Charged, e.Refunded, tc.refunded)
			}
			if e.Breaker != tc.breaker {
				t.Errorf("breaker %q, want %q", e.Breaker, tc.breaker)
			}
		})
	}
}

// A response that holds more than its price (a list overran the size it
// was priced at: here the default 10, for 60 repositories) ran unpaid
// work: the excess is debited after the response, refunds on or off,
// saturating at empty and never refusing the response, and reported in
// extensions.cost, the headers and the Event. So an under-estimated schema
// cannot be farmed: each such request pays what its response held.
func TestExcessDebitedAfterResponse(t *testing.T) {
	const q = `{ user(login: "` + hoarder + `") { repos { name } } }` // 1 + 10 × 1 = 11
	for _, refunds := range []bool{false, true} {
		cfg := testConfig(t, newClock())
		if refunds {
			cfg = withRefunds(cfg)
		}
		rec := &recorder{}
		cfg.Observer = rec
		s := newTestSchema()
		h := graphQLServer(newLimiter(t, cfg), s)

		// 11 debited before, 50 more after: 100 − 61.
		w, resp := query(t, h, q, bearer(aliceKey))
		c := resp.Extensions.Cost
		if w.Code != http.StatusOK || c.RequestedQueryCost != 11 || c.ActualQueryCost == nil || *c.ActualQueryCost != 1+hoarderRepos {
			t.Fatalf("refunds %v: status %d, extensions.cost %+v", refunds, w.Code, c)
		}
		if got := w.Header().Get(middleware.HeaderXRateLimitRemaining); got != "39" || *c.ThrottleStatus.CurrentlyAvailable != 39 {
			t.Errorf("refunds %v: X-RateLimit-Remaining %s, currentlyAvailable %d; want 39", refunds, got, *c.ThrottleStatus.CurrentlyAvailable)
		}
		if e := rec.take(); len(e) != 1 || e[0].Charged != 11 || e[0].ActualCost != 61 || e[0].Excess != 50 || e[0].Refunded != 0 {
			t.Errorf("refunds %v: events %+v", refunds, e)
		}

		// 11 of the 39 left before, then the excess takes the other 28:
		// the budget saturates at empty; the response is still served.
		w, _ = query(t, h, q, bearer(aliceKey))
		if w.Code != http.StatusOK || w.Header().Get(middleware.HeaderXRateLimitRemaining) != "0" {
			t.Errorf("refunds %v: second: status %d, remaining %s; want 200 and 0", refunds, w.Code, w.Header().Get(middleware.HeaderXRateLimitRemaining))
		}
		if e := rec.take(); len(e) != 1 || e[0].Excess != 50 {
			t.Errorf("refunds %v: second: events %+v", refunds, e)
		}
		// The work the excess paid for is not handed out again.
		before := s.resolvers.Load()
		if w, _ := query(t, h, q, bearer(aliceKey)); w.Code != http.StatusTooManyRequests || s.resolvers.Load() != before {
			t.Errorf("refunds %v: third: status %d, %d resolvers ran; want 429 and none", refunds, w.Code, s.resolvers.Load()-before)
		}
	}
}

// An executor that says the operation never ran (ErrNotExecuted in an
// error's Err, as a proxy whose upstream is down does) gives the price
// back but InvalidCost, refunds off too; an error without it keeps the
// whole price, since the work it did before failing is not known.
func TestNotExecutedGivesThePriceBack(t *testing.T) {
	for _, tc := range []struct {
		name      string
		err       error
		remaining string
		actual    int64
	}{
		{"not executed", fmt.Errorf("upstream unavailable: dial tcp: connection refused: %w", middleware.ErrNotExecuted), "99", 1},
		{"failed while running", errors.New("upstream answered 500"), "39", -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t, newClock()) // refunds off
			schema := newTestSchema().schema
			es := &graphql.ExecutableSchemaMock{
				SchemaFunc: func() *ast.Schema { return schema },
				ExecFunc: func(ctx context.Context) graphql.ResponseHandler {
					done := false
					return func(ctx context.Context) *graphql.Response {
						if done {
							return nil
						}
						done = true
						return &graphql.Response{Errors: gqlerror.List{{Message: tc.err.Error(), Err: tc.err}}}
					}
				},
			}
			w, resp := query(t, graphQLServerOf(newLimiter(t, cfg), es), query61, bearer(aliceKey))
			if w.Code != http.StatusOK || len(resp.Errors) != 1 {
				t.Fatalf("status %d, errors %+v", w.Code, resp.Errors)
			}
			if got := w.Header().Get(middleware.HeaderXRateLimitRemaining); got != tc.remaining {
				t.Errorf("X-RateLimit-Remaining %s, want %s (price 61, InvalidCost 1)", got, tc.remaining)
			}
			c := resp.Extensions.Cost
			switch {
			case tc.actual < 0 && c.ActualQueryCost != nil:
				t.Errorf("actual cost %d, want none", *c.ActualQueryCost)
			case tc.actual >= 0 && (c.ActualQueryCost == nil || *c.ActualQueryCost != tc.actual):
				t.Errorf("actual cost %v, want %d", c.ActualQueryCost, tc.actual)
			}
		})
	}
}

// A subscription whose executor never started it (ErrNotExecuted before
// any event: a proxy whose upstream could not be reached) gives its
// subscribe's price back but InvalidCost, as an operation does.
func TestSubscriptionNotExecutedGivesThePriceBack(t *testing.T) {
	for _, tc := range []struct {
		name      string
		err       error
		remaining string
	}{
		{"not executed", fmt.Errorf("upstream unavailable: %w", middleware.ErrNotExecuted), "98"}, // 100 − 1 − 1
		{"failed", errors.New("upstream unavailable: timed out"), "89"},                           // 100 − 10 − 1
	} {
		t.Run(tc.name, func(t *testing.T) {
			schema := gqlparser.MustLoadSchema(&ast.Source{Name: "s.graphqls", Input: `
type Query { a: Int }
type Subscription { issues(first: Int): [Issue!]! }
type Issue { title: String! }`})
			es := &graphql.ExecutableSchemaMock{
				SchemaFunc: func() *ast.Schema { return schema },
				ExecFunc: func(ctx context.Context) graphql.ResponseHandler {
					if graphql.GetOperationContext(ctx).Operation.Operation == ast.Query {
						return graphql.OneShot(&graphql.Response{Data: []byte(`{"a":1}`)})
					}
					return graphql.OneShot(&graphql.Response{Errors: gqlerror.List{{Message: tc.err.Error(), Err: tc.err}}})
				},
			}
			srv := handler.New(es)
			srv.AddTransport(transport.SSE{})
			srv.AddTransport(transport.POST{})
			h := newLimiter(t, withRefunds(testConfig(t, newClock()))).Handler(srv)

			req := httptest.NewRequest(http.MethodPost, "/graphql", strings.NewReader(`{"query":"subscription { issues(first: 10) { title } }"}`))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "text/event-stream")
			req.Header.Set("Authorization", "Bearer "+aliceKey)
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req) // the stream ends after the error
			if !strings.Contains(w.Body.String(), "upstream unavailable") {
				t.Fatalf("the stream: %d %s", w.Code, w.Body.String())
			}
			w, _ = query(t, h, `{ a }`, bearer(aliceKey))
			if got := w.Header().Get(middleware.HeaderXRateLimitRemaining); got != tc.remaining {
				t.Errorf("X-RateLimit-Remaining %s after the subscription and a query, want %s", got, tc.remaining)
			}
		})
	}
}
