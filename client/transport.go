package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"
)

// Defaults of a Transport's zero fields.
const (
	defaultMaxWait     = 30 * time.Second
	defaultMaxRetries  = 3
	defaultRetryBudget = 0.1
	// maxRetryTokens is the retry allowance a Transport starts with and
	// never exceeds.
	maxRetryTokens = 10
	// maxPrices bounds the operations whose price a Transport remembers.
	maxPrices = 1000
)

// ErrRetryAfter is returned, wrapped, by RoundTrip when an earlier
// refusal's Retry-After, which applies to every request, runs out later
// than MaxWait allows: the request is not sent.
var ErrRetryAfter = errors.New("client: the server asked to wait longer than MaxWait")

// Transport is an http.RoundTripper that paces requests on the budget a
// costguard server reports, and retries refused queries after the wait
// the server gives. Its zero value is ready to use; it must not be copied
// after first use. One Transport keeps one view of the budget: give each
// API key its own.
type Transport struct {
	// Base sends the requests; nil: http.DefaultTransport.
	Base http.RoundTripper
	// MaxWait bounds how long one RoundTrip waits in all, for its turn
	// and for the Retry-After of its refusals; zero: 30 seconds. A
	// request whose turn the view puts later is sent when MaxWait runs
	// out; a refusal whose Retry-After runs out later is returned to the
	// caller.
	MaxWait time.Duration
	// MaxRetries is how many times one request is sent again after
	// refusals; zero: 3; negative: never.
	MaxRetries int
	// RetryBudget is the share of requests that may be retries: each
	// request adds RetryBudget to an allowance (which starts at, and
	// never exceeds, 10 retries) and each retry takes one from it; zero:
	// 0.1; negative: no retries.
	RetryBudget float64

	mu          sync.Mutex
	pace        pacer
	prices      map[string]priceEntry
	retryTokens float64
	started     bool

	clock clock          // nil: the wall clock
	rand  func() float64 // in [0, 1); nil: math/rand/v2
}

var _ http.RoundTripper = (*Transport)(nil)

// priceEntry is an operation's last price.
type priceEntry struct {
	name  string
	price int64
}

// clock is where a Transport reads the time and waits.
type clock interface {
	Now() time.Time
	// After returns a channel that receives once d has passed, and a
	// function that stops it.
	After(d time.Duration) (<-chan time.Time, func())
}

type wallClock struct{}

func (wallClock) Now() time.Time { return time.Now() }

func (wallClock) After(d time.Duration) (<-chan time.Time, func()) {
	t := time.NewTimer(d)
	return t.C, func() { t.Stop() }
}

// RoundTrip sends req when the budget has room for it, and again, for a
// query (or a request marked with WithRetrySafe) with a re-readable body,
// after a refusal's Retry-After. It returns the last response, its body
// unread.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	op := readOperation(req)
	price := t.start(ctx, op)
	deadline := t.now().Add(t.maxWait())
	out := req
	for attempt := 0; ; attempt++ {
		if err := t.waitTurn(ctx, price, deadline); err != nil {
			closeBody(out) // a RoundTripper closes the body, sent or not
			return nil, err
		}
		resp, s, err := t.send(out, op, price)
		if err != nil {
			return nil, err
		}
		if s.price > 0 && priceFrom(ctx) == 0 {
			price = s.price // a retry is paced at the price just given
		}
		wait, ok := t.retryWait(ctx, op, &s, attempt, deadline)
		if !ok {
			return resp, nil
		}
		if t.sleep(ctx, wait) != nil {
			return resp, nil
		}
		next, err := again(req)
		if err != nil {
			return resp, nil
		}
		discard(resp)
		out = next
	}
}

// start counts a new request toward the retry allowance and returns its
// price: the caller's (WithPrice), or the last the server gave for the
// same operation, or 0.
func (t *Transport) start(ctx context.Context, op operation) int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.started {
		t.started, t.retryTokens = true, maxRetryTokens
	}
	t.retryTokens = min(t.retryTokens+t.retryBudget(), maxRetryTokens)
	if p := priceFrom(ctx); p > 0 {
		return p
	}
	return t.prices[op.key].price
}

// waitTurn waits until the view has room for price points, or deadline,
// and records the request as sent. It fails without waiting when a hold
// (see pacer.hold) outlasts deadline, and when ctx ends.
func (t *Transport) waitTurn(ctx context.Context, price int64, deadline time.Time) error {
	for {
		now := t.now()
		t.mu.Lock()
		d, hold := t.pace.delay(now, price), t.pace.hold
		held := now.Before(hold)
		if d <= 0 || (!held && !now.Before(deadline)) {
			t.pace.sent(now, price)
			t.mu.Unlock()
			return nil
		}
		t.mu.Unlock()
		if held && hold.After(deadline) {
			return fmt.Errorf("%w: %s", ErrRetryAfter, hold.Sub(now).Round(time.Millisecond))
		}
		if wait := t.jitter(d); held || now.Add(wait).Before(deadline) {
			d = wait
		} else {
			d = deadline.Sub(now)
		}
		if err := t.sleep(ctx, d); err != nil {
			return err
		}
	}
}

// send sends out and reads the signals of its answer.
func (t *Transport) send(out *http.Request, op operation, price int64) (*http.Response, signals, error) {
	sentAt := t.now()
	resp, err := t.base().RoundTrip(out)
	if err != nil {
		t.mu.Lock()
		t.pace.answered(price)
		t.mu.Unlock()
		return nil, signals{}, err
	}
	now := t.now()
	s := readSignals(resp, now)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.pace.answered(price)
	t.pace.observe(now, sentAt, price, &s)
	t.learn(op, &s)
	return resp, s, nil
}

// learn remembers the price the server gave op in s.
func (t *Transport) learn(op operation, s *signals) {
	if op.key == "" || s.price <= 0 {
		return
	}
	if _, ok := t.prices[op.key]; !ok && len(t.prices) >= maxPrices {
		for k := range t.prices { // drop one: the map's order is random
			delete(t.prices, k)
			break
		}
	}
	if t.prices == nil {
		t.prices = make(map[string]priceEntry)
	}
	t.prices[op.key] = priceEntry{name: op.name, price: s.price}
}

// retryWait decides whether s, the signals of the answer to attempt, are
// a refusal to retry, and how long to wait first: the server's
// Retry-After with jitter (cut at deadline or the context's), never less.
// ok is false for an answer to return.
func (t *Transport) retryWait(ctx context.Context, op operation, s *signals, attempt int, deadline time.Time) (time.Duration, bool) {
	if !s.refused || s.retryAfter <= 0 || attempt >= t.maxRetries() || t.RetryBudget < 0 || !op.retryable(ctx) {
		return 0, false
	}
	now := t.now()
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	if now.Add(s.retryAfter).After(deadline) {
		return 0, false
	}
	wait := min(t.jitter(s.retryAfter), deadline.Sub(now))
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.retryTokens < 1 {
		return 0, false
	}
	t.retryTokens--
	return wait, true
}

// retryable reports whether op may be sent again: a query (a GET, HEAD or
// OPTIONS outside GraphQL), or anything marked with WithRetrySafe, with a
// body that can be read again.
func (op operation) retryable(ctx context.Context) bool {
	if !op.rereadable {
		return false
	}
	return op.kind == queryKind || (op.kind == unknownKind && op.idempotent) || retrySafe(ctx)
}

// again is req to send once more, with its body read anew.
func again(req *http.Request) (*http.Request, error) {
	next := req.Clone(req.Context())
	if req.GetBody != nil {
		body, err := req.GetBody()
		if err != nil {
			return nil, err
		}
		next.Body = body
	}
	return next, nil
}

// closeBody closes the body of a request that will not be sent.
func closeBody(req *http.Request) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
}

// discard reads what is left of a refusal's body, so that its connection
// is reused, and closes it.
func discard(resp *http.Response) {
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxBodyBytes))
	_ = resp.Body.Close()
}

// sleep waits d, or until ctx ends.
func (t *Transport) sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	c, stop := t.clk().After(d)
	defer stop()
	select {
	case <-c:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// jitter is d lengthened by a random share of itself, at most
// jitterShare.
func (t *Transport) jitter(d time.Duration) time.Duration {
	r := rand.Float64
	if t.rand != nil {
		r = t.rand
	}
	return d + time.Duration(float64(d)*jitterShare*r())
}

func (t *Transport) clk() clock {
	if t.clock != nil {
		return t.clock
	}
	return wallClock{}
}

func (t *Transport) now() time.Time { return t.clk().Now() }

func (t *Transport) base() http.RoundTripper {
	if t.Base != nil {
		return t.Base
	}
	return http.DefaultTransport
}

func (t *Transport) maxWait() time.Duration {
	if t.MaxWait > 0 {
		return t.MaxWait
	}
	return defaultMaxWait
}

func (t *Transport) maxRetries() int {
	switch {
	case t.MaxRetries < 0:
		return 0
	case t.MaxRetries == 0:
		return defaultMaxRetries
	}
	return t.MaxRetries
}

func (t *Transport) retryBudget() float64 {
	switch {
	case t.RetryBudget < 0:
		return 0
	case t.RetryBudget == 0:
		return defaultRetryBudget
	}
	return t.RetryBudget
}
