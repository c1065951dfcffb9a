package client

import "context"

// ctxKey keys the values the caller puts on a request's context.
type ctxKey uint8

const (
	priceKey ctxKey = iota
	retrySafeKey
)

// WithPrice returns ctx carrying the price, in points, of the operation a
// request made with it sends: the Transport paces it at that price
// instead of the one it learned from an earlier answer. A price below one
// is ignored.
func WithPrice(ctx context.Context, points int64) context.Context {
	return context.WithValue(ctx, priceKey, points)
}

// WithRetrySafe returns ctx marking the request made with it as safe to
// send twice: a mutation (or a REST request other than GET, HEAD or
// OPTIONS) is retried after a refusal only when so marked.
func WithRetrySafe(ctx context.Context) context.Context {
	return context.WithValue(ctx, retrySafeKey, true)
}

// priceFrom is the price WithPrice put on ctx, or 0.
func priceFrom(ctx context.Context) int64 {
	if p, ok := ctx.Value(priceKey).(int64); ok && p > 0 {
		return p
	}
	return 0
}

// retrySafe reports whether WithRetrySafe marked ctx.
func retrySafe(ctx context.Context) bool {
	safe, _ := ctx.Value(retrySafeKey).(bool)
	return safe
}
