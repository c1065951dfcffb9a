package middleware

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/99designs/gqlgen/graphql"
	"github.com/costguard/costguard/budget"
	"github.com/vektah/gqlparser/v2/gqlerror"
)

// A subscription pays its price when it starts, like a query, then each
// event pays its own actual cost (the event's payload priced under the
// cost model, at least MinCost) before it is sent: an event the budget
// cannot pay ends the subscription with that event's refusal. How many
// subscriptions one principal holds open is capped
// (SubscriptionOptions.MaxPerPrincipal), across its connections and
// transports in this process.

// CodeSubscriptionsLimited: the principal already holds
// SubscriptionOptions.MaxPerPrincipal subscriptions open (429).
const CodeSubscriptionsLimited = "SUBSCRIPTIONS_LIMITED"

// defaultMaxSubscriptionsPerPrincipal is the default of
// SubscriptionOptions.MaxPerPrincipal: what GitHub allows in flight.
const defaultMaxSubscriptionsPerPrincipal = 100

// SubscriptionOptions bound GraphQL subscriptions.
type SubscriptionOptions struct {
	// MaxPerPrincipal caps the subscriptions one principal holds open at
	// once in this process, over every connection and transport; one more
	// is refused with SUBSCRIPTIONS_LIMITED. A slot is free again when the
	// subscription completes, the client stops it, or its connection
	// closes. Default 100; None: no cap.
	MaxPerPrincipal int `yaml:"max_per_principal"`
}

// maxSubscriptions resolves o's cap: 0 when there is none.
func (o SubscriptionOptions) maxSubscriptions() (int, error) {
	switch n := o.MaxPerPrincipal; {
	case n == 0:
		return defaultMaxSubscriptionsPerPrincipal, nil
	case n == None:
		return 0, nil
	case n < 0:
		return 0, fmt.Errorf("%w: Subscriptions.MaxPerPrincipal %d is negative", ErrInvalidConfig, n)
	default:
		return n, nil
	}
}

// subscriptionSlots counts the open subscriptions of each principal.
// Entries exist only while a subscription is open, so its size is bounded
// by the subscriptions open.
type subscriptionSlots struct {
	mu   sync.Mutex
	open map[string]int
	all  int
}

// acquire takes one of key's slots, if fewer than limit are held (limit 0:
// no cap).
func (s *subscriptionSlots) acquire(key string, limit int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if limit > 0 && s.open[key] >= limit {
		return false
	}
	if s.open == nil {
		s.open = make(map[string]int)
	}
	s.open[key]++
	s.all++
	return true
}

func (s *subscriptionSlots) release(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.open[key] <= 1 {
		delete(s.open, key)
	} else {
		s.open[key]--
	}
	s.all--
}

// OpenSubscriptions reports the subscriptions this process holds open for
// the Limiter's principals.
func (l *Limiter) OpenSubscriptions() int {
	l.subs.mu.Lock()
	defer l.subs.mu.Unlock()
	return l.subs.all
}

// subscription is one open subscription: its slot, and whether its events
// are still paid for.
type subscription struct {
	slots *subscriptionSlots
	key   string

	// admitted: its price was debited, so its events are charged one by
	// one. ended: an event could not be paid, so no more are sent.
	// priceFinal: an event was charged, or the price given back, so the
	// subscribe's price is not given back (again).
	admitted, ended, priceFinal atomic.Bool

	mu   sync.Mutex
	held bool // it holds a slot
	stop func() bool
}

// openSubscription takes a slot for the subscription st starts, refusing
// it (it pays InvalidCost) when its principal holds the most it may. The
// slot is given back when ctx, the operation's, ends, whatever else does.
func (e *costExtension) openSubscription(ctx context.Context, st *requestState) *gqlerror.Error {
	if !e.l.subs.acquire(st.id.Key, st.set.maxSubscriptions) {
		return e.refuseUnpriced(ctx, st, codedError(CodeSubscriptionsLimited, 0,
			"too many subscriptions open: %d at once are allowed", st.set.maxSubscriptions), false)
	}
	sub := &subscription{slots: &e.l.subs, key: st.id.Key, held: true}
	sub.mu.Lock()
	sub.stop = context.AfterFunc(ctx, sub.close)
	sub.mu.Unlock()
	st.mu.Lock()
	st.sub = sub
	st.mu.Unlock()
	return nil
}

// settle records the subscription's decision: admitted, its events are
// charged; refused, its slot is free again.
func (s *subscription) settle(admitted bool) {
	if s == nil {
		return
	}
	if !admitted {
		s.close()
		return
	}
	s.admitted.Store(true)
}

// close gives the slot back, once.
func (s *subscription) close() {
	if s == nil {
		return
	}
	s.mu.Lock()
	held, stop := s.held, s.stop
	s.held, s.stop = false, nil
	s.mu.Unlock()
	if stop != nil {
		stop()
	}
	if held {
		s.slots.release(s.key)
	}
}

// stream wraps the subscription's responses: once an event could not be
// paid, the stream ends (the transport then completes it), and its slot
// is given back when the stream ends.
func (s *subscription) stream(h graphql.ResponseHandler) graphql.ResponseHandler {
	if s == nil || h == nil {
		return h
	}
	return func(ctx context.Context) *graphql.Response {
		if s.ended.Load() {
			s.close()
			return nil
		}
		resp := h(ctx)
		if resp == nil {
			s.close()
		}
		return resp
	}
}

// chargeEvent debits one event of an admitted subscription before it is
// sent: its actual cost, at least MinCost. An event the budget cannot pay
// is replaced by the refusal, and the subscription ends after it. A
// response without data (an error of the subscription itself) is no
// event and pays nothing.
func (e *costExtension) chargeEvent(ctx context.Context, st *requestState, opCtx *graphql.OperationContext, resp *graphql.Response) *graphql.Response {
	if len(resp.Data) == 0 || string(resp.Data) == "null" {
		if notExecuted(resp.Errors) && st.sub.priceFinal.CompareAndSwap(false, true) {
			// The executor never started it (a proxy's upstream could not
			// be reached): the subscribe pays InvalidCost, as an operation
			// that did not run does.
			st.mu.Lock()
			o, price := st.outcome, st.cost
			st.mu.Unlock()
			e.refundUnexecuted(ctx, st, o, price)
		}
		return resp
	}
	st.sub.priceFinal.Store(true)
	l := e.l
	st.mu.Lock()
	costPlan, price, ln := st.costPlan, st.cost, st.lane
	st.mu.Unlock()
	cost := price
	if costPlan != nil {
		if actual, err := costPlan.ActualCost(opCtx.Variables, resp.Data); err == nil {
			cost = actual
		} else {
			l.log.DebugContext(ctx, "middleware: cannot price a subscription event; charging the subscription's price", "err", err)
		}
	}
	cost = max(cost, st.set.gql.MinCost)
	o := l.engine.Charge(ctx, st.request(ln, cost, nil))
	if l.observing(ctx) {
		// RequestedCost is what the event cost; it has no actual cost apart
		// from that (costguard_operation_actual_cost_points stays about
		// operations).
		ev := l.newEvent(KindSubscriptionEvent, st.id, st.plan, ln, o, cost, codeOf(o, nil))
		st.mu.Lock()
		ev.Operation = st.operation
		st.mu.Unlock()
		l.report(ctx, &ev)
	}
	c := Cost{
		RequestedQueryCost: price,
		ActualQueryCost:    &cost,
		ThrottleStatus:     ThrottleStatus{MaximumAvailable: st.plan.Burst, RestoreRate: st.plan.restoreRate},
	}
	if o.Known {
		left := max(o.Decision.Remaining, 0)
		c.ThrottleStatus.CurrentlyAvailable = &left
	}
	if o.Verdict != budget.Admitted {
		st.sub.ended.Store(true)
		return &graphql.Response{
			Errors:     gqlerror.List{l.verdictError(&o, cost, st.plan)},
			Extensions: map[string]any{CostExtensionKey: c},
		}
	}
	if resp.Extensions == nil {
		resp.Extensions = make(map[string]any, 1)
	}
	resp.Extensions[CostExtensionKey] = c
	return resp
}
