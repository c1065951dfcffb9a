package middleware

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/identity"
)

// routeCost is the handler registered for each costed pattern in the
// Limiter's private ServeMux: matching a request returns it, never runs it.
type routeCost int64

func (routeCost) ServeHTTP(http.ResponseWriter, *http.Request) {}

// buildRoutes compiles the REST cost table and refuses any cost that some
// plan could never pay.
func (s *settings) buildRoutes(o RESTOptions) error {
	if o.DefaultCost < 0 {
		return keyed(fmt.Errorf("%w: REST default cost %d is negative", ErrInvalidConfig, o.DefaultCost), "rest", "default_cost")
	}
	s.restCost = o.DefaultCost
	if s.restCost == 0 {
		s.restCost = defaultRESTCost
	}
	smallest := s.smallestPlan()
	s.leastBurst = max(s.leastBurst, s.restCost)
	if s.restCost > smallest.Burst {
		return keyed(fmt.Errorf("%w: REST default cost %d is more than the burst %d of plan %q: no request on that plan could ever pass",
			ErrInvalidConfig, s.restCost, smallest.Burst, smallest.Name()), "rest", "default_cost")
	}
	s.routes = http.NewServeMux()
	patterns := make([]string, 0, len(o.Routes))
	for p := range o.Routes {
		patterns = append(patterns, p)
	}
	slices.Sort(patterns) // deterministic: the first bad route is reported
	for _, pattern := range patterns {
		cost := o.Routes[pattern]
		if cost < 0 {
			return keyed(fmt.Errorf("%w: REST route %q has negative cost %d", ErrInvalidConfig, pattern, cost), "rest", "routes", pattern)
		}
		s.leastBurst = max(s.leastBurst, cost)
		if cost > smallest.Burst {
			return keyed(fmt.Errorf("%w: REST route %q costs %d, more than the burst %d of plan %q: no request on that plan could ever pass",
				ErrInvalidConfig, pattern, cost, smallest.Burst, smallest.Name()), "rest", "routes", pattern)
		}
		if err := handlePattern(s.routes, pattern, routeCost(cost)); err != nil {
			return keyed(fmt.Errorf("%w: REST route %q: %v", ErrInvalidConfig, pattern, err), "rest", "routes", pattern)
		}
	}
	if names := s.pol.RouteNames(); len(names) > 0 {
		s.routeLimits = http.NewServeMux()
		for _, pattern := range names {
			if err := handlePattern(s.routeLimits, pattern, routeLimit{s.pol.Route(pattern)}); err != nil {
				return keyed(fmt.Errorf("%w: REST route limit %q: %v", ErrInvalidConfig, pattern, err), "rest", "route_limits", pattern)
			}
		}
	}
	return nil
}

// routeLimit is the handler registered for each limited pattern in the
// Limiter's private ServeMux of route limits: matching a request returns
// it, never runs it.
type routeLimit struct{ rule *budget.RouteRule }

func (routeLimit) ServeHTTP(http.ResponseWriter, *http.Request) {}

// routeLimitOf returns the limit of r's route, its most specific limited
// pattern's, nil when none matches.
func (s *settings) routeLimitOf(r *http.Request) *budget.RouteRule {
	if s.routeLimits == nil {
		return nil
	}
	if h, _ := s.routeLimits.Handler(r); h != nil {
		if rl, ok := h.(routeLimit); ok {
			return rl.rule
		}
	}
	return nil
}

// handlePattern registers a pattern, turning ServeMux's panic on a malformed
// or conflicting pattern into an error.
func handlePattern(mux *http.ServeMux, pattern string, h http.Handler) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	mux.Handle(pattern, h)
	return nil
}

// routeCostOf returns the cost of r: its most specific pattern's, else the
// default.
func (s *settings) routeCostOf(r *http.Request) int64 {
	if h, _ := s.routes.Handler(r); h != nil {
		if c, ok := h.(routeCost); ok {
			return int64(c)
		}
	}
	return s.restCost
}

// boundRESTBody enforces MaxBodyBytes before anything is debited: a
// declared larger body is answered 413 at once, a body of unknown length
// (chunked) is read up to the limit first, so it gets the 413 too rather
// than whatever next makes of a failed read. It reports whether to go on.
func (l *Limiter) boundRESTBody(w http.ResponseWriter, r *http.Request) bool {
	switch {
	case r.Body == nil || r.Body == http.NoBody:
		return true
	case r.ContentLength > l.maxBody:
		writeRESTError(w, http.StatusRequestEntityTooLarge, "request_too_large", 0)
		return false
	case r.ContentLength >= 0:
		r.Body = http.MaxBytesReader(w, r.Body, l.maxBody)
		return true
	}
	if _, ref := readBody(r, l.maxBody); ref != nil {
		writeRESTError(w, ref.status, "request_too_large", 0)
		return false
	}
	return true
}

// REST returns middleware that debits each request's route cost from its
// principal's budget (the one GraphQL operations draw from too) before
// calling next. Rejections are JSON:
//
//	401 {"error":"unknown_api_key"}
//	413 {"error":"request_too_large"}    (Dependencies.MaxBodyBytes; nothing debited)
//	429 {"error":"rate_limited","retry_after_seconds":N}
//	429 {"error":"quota_exceeded","retry_after_seconds":N}   (Plan.Quota; N is the window's end)
//	503 {"error":"rate_limiter_unavailable","retry_after_seconds":N}
//	503 {"error":"overloaded","retry_after_seconds":N}   (Dependencies.Overload; nothing debited)
//	429 {"error":"concurrency_limited","retry_after_seconds":N}   (Policy.Concurrency; nothing debited)
//	429 {"error":"route_rate_limited","retry_after_seconds":N}   (RESTOptions.RouteLimits; nothing debited)
//
// Admitted requests reach next with the rate-limit headers already set;
// one a leaky_bucket_shaping route limit gives a turn later than now is
// held until its turn (at most the limit's MaxDelay), and does not reach
// next if its client leaves first (the turn stays taken).
func (l *Limiter) REST(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		set := l.current()
		id, p, err := set.identify(r)
		if err != nil {
			l.restIdentifyFailed(w, r, err)
			return
		}
		cost := set.routeCostOf(r)
		ln := set.laneForREST(r, id)
		if !l.boundRESTBody(w, r) {
			if l.observing(r.Context()) {
				e := l.newEvent(KindREST, id, p, ln, budget.Outcome{Verdict: budget.CapExceeded}, cost, "request_too_large")
				l.report(r.Context(), &e)
			}
			return
		}
		adm, ok := l.admit(r.Context(), r, id, ln)
		if !ok {
			l.challenge(r.Context(), w.Header(), id, ln)
			if l.observing(r.Context()) && r.Context().Err() == nil {
				e := l.newEvent(KindREST, id, p, ln, budget.Outcome{Verdict: budget.Shed}, cost, budget.Shed.Answer().RESTCode)
				l.report(r.Context(), &e)
			}
			writeRESTError(w, http.StatusServiceUnavailable, budget.Shed.Answer().RESTCode, l.shedRetryAfter())
			return
		}
		defer adm.done()
		req := budget.Request{Key: id.Key, Rule: p.Rule, Lane: ln.budgetRule(), Cost: cost, Route: set.routeLimitOf(r)}
		if req.Route != nil && req.Route.By != budget.ByPrincipal {
			req.Addr = set.addrKey(r)
		}
		sl, refused := l.engine.AcquireSlot(r.Context(), req)
		if refused != nil {
			a := refused.Verdict.Answer()
			if l.observing(r.Context()) && r.Context().Err() == nil {
				e := l.newEvent(KindREST, id, p, ln, *refused, cost, a.RESTCode)
				l.report(r.Context(), &e)
			}
			writeRESTError(w, a.RESTStatus, a.RESTCode, max(refused.RetryAfter, 1))
			return
		}
		defer sl.Release()
		o := l.engine.Charge(r.Context(), req)
		if o.Known {
			set.setOutcomeHeaders(w.Header(), p, &o, l.clock.Now())
		}
		if l.observing(r.Context()) {
			code := o.Verdict.Answer().RESTCode
			if o.Shadowed != 0 {
				code = o.Shadowed.Answer().RESTCode
			}
			e := l.newEvent(KindREST, id, p, ln, o, cost, code)
			l.report(r.Context(), &e)
		}
		switch o.Verdict {
		case budget.Admitted:
			if !l.hold(r.Context(), o.Delay) {
				return // the client left while waiting its turn
			}
			next.ServeHTTP(w, l.withDegradation(r))
		case budget.RateLimited, budget.OverBudget, budget.Unavailable, budget.QuotaExceeded, budget.RouteLimited:
			if o.Verdict == budget.RateLimited {
				l.challenge(r.Context(), w.Header(), id, ln)
			}
			a := o.Verdict.Answer()
			retry := o.RetryAfter
			if a.RESTStatus == http.StatusTooManyRequests {
				retry = max(retry, 1) // a 429 always says when to come back
			}
			writeRESTError(w, a.RESTStatus, a.RESTCode, retry)
		}
	})
}

// hold waits d, an admitted request's turn under a leaky_bucket_shaping
// limit (never longer than its MaxDelay), before the request runs. It
// reports false when ctx ended first: the client left, and the turn,
// which cannot be given back, stays taken.
func (l *Limiter) hold(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	fire, stop := l.timer(d)
	select {
	case <-fire:
		return true
	case <-ctx.Done():
		stop()
		return false
	}
}

func (l *Limiter) restIdentifyFailed(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, identity.ErrUnknownAPIKey) {
		writeRESTError(w, http.StatusUnauthorized, "unknown_api_key", 0)
		return
	}
	l.log.ErrorContext(r.Context(), "middleware: cannot identify the request; answering 503", "err", err)
	writeRESTError(w, http.StatusServiceUnavailable, "rate_limiter_unavailable", l.engine.RetryAfter(budget.UnavailableRetryAfter))
}

// writeRESTError writes {"error":code} and, when retryAfter > 0, the
// retry_after_seconds field and the Retry-After header. Codes are fixed
// identifiers, so no escaping is needed.
func writeRESTError(w http.ResponseWriter, status int, code string, retryAfter int64) {
	body := make([]byte, 0, 64)
	body = append(body, `{"error":"`...)
	body = append(body, code...)
	body = append(body, '"')
	if retryAfter > 0 {
		w.Header().Set(HeaderRetryAfter, strconv.FormatInt(retryAfter, 10))
		body = append(body, `,"retry_after_seconds":`...)
		body = strconv.AppendInt(body, retryAfter, 10)
	}
	body = append(body, "}\n"...)
	h := w.Header()
	h.Set("Content-Type", jsonUTF8)
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}
