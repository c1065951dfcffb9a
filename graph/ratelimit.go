package graph

import (
	"context"
	"errors"
	"time"

	"github.com/costguard/costguard/graph/model"
	"github.com/costguard/costguard/middleware"
)

// ErrRateLimitUnavailable: rateLimit was selected, but no costguard
// Extension priced the operation (the schema served alone, as in this
// package's tests), or the budget could not be read (a dry run while the
// store is down and the plan fails closed).
var ErrRateLimitUnavailable = errors.New("graph: the rate limit is unavailable")

// rateLimit serves Query.rateLimit and Mutation.rateLimit: the budget
// costguard's Extension decided for this operation, GitHub's shape. The
// dryRun argument is the Extension's business: by the time this runs, a dry
// run has already been priced without a debit.
func rateLimit(ctx context.Context) (*model.RateLimit, error) {
	s, ok := middleware.RateLimitFrom(ctx)
	if !ok {
		return nil, ErrRateLimitUnavailable
	}
	rl := &model.RateLimit{ResetAt: s.ResetAt.UTC().Format(time.RFC3339)}
	middleware.SetInt(&rl.Limit, s.Limit) // builds whether gqlgen maps Int to int or int32
	middleware.SetInt(&rl.Cost, s.Cost)
	middleware.SetInt(&rl.Remaining, s.Remaining)
	middleware.SetInt(&rl.Used, s.Used)
	middleware.SetInt(&rl.NodeCount, s.NodeCount)
	return rl, nil
}
