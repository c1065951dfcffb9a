package middleware_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/middleware"
)

// A field limit's refusal counts in words: "1 selection", "selects it 1
// time", "1 is left"; "2 selections", "2 times", "0 are left".
func TestFieldLimitMessageSpellsCounts(t *testing.T) {
	for _, tt := range []struct {
		name         string
		limit        int64
		first, then  int // aliases of the admitted mutation (0: none), then of the refused one
		wantMessage  string
		wantRetrySec string
	}{
		{"one selection, once, none left", 1, 1, 1,
			"field Mutation.createIssue is limited to 1 selection per 1m0s; the operation selects it 1 time and 0 are left; retry in 60 seconds", "60"},
		{"selections, twice, one left", 3, 2, 2,
			"field Mutation.createIssue is limited to 3 selections per 1m0s; the operation selects it 2 times and 1 is left; retry in 20 seconds", "20"},
		{"never, one selection", 1, 0, 2,
			"field Mutation.createIssue is limited to 1 selection per 1m0s and the operation selects it 2 times: it can never run", ""},
		{"never, selections", 2, 0, 3,
			"field Mutation.createIssue is limited to 2 selections per 1m0s and the operation selects it 3 times: it can never run", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			clock := newClock()
			h := graphQLServer(newLimiter(t, fieldLimitConfig(t, clock, map[string]budget.FieldLimit{
				"Mutation.createIssue": {Limit: tt.limit, Per: time.Minute},
			})), newTestSchema())
			if tt.first > 0 {
				if w, resp := query(t, h, aliasedIssues(tt.first), bearer(aliceKey)); w.Code != http.StatusOK || resp.code() != "" {
					t.Fatalf("first: %d %s", w.Code, w.Body)
				}
			}
			w, resp := query(t, h, aliasedIssues(tt.then), bearer(aliceKey))
			if w.Code != http.StatusTooManyRequests || resp.code() != budget.CodeFieldRateLimited {
				t.Fatalf("%d %s", w.Code, w.Body)
			}
			if got := resp.Errors[0].Message; got != tt.wantMessage {
				t.Errorf("message\n got %q\nwant %q", got, tt.wantMessage)
			}
			if got := w.Header().Get(middleware.HeaderRetryAfter); got != tt.wantRetrySec {
				t.Errorf("Retry-After = %q, want %q", got, tt.wantRetrySec)
			}
		})
	}
}
