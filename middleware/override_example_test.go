package middleware_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/identity"
	"github.com/costguard/costguard/middleware"
	"github.com/costguard/costguard/override"
)

// An override gives one principal another plan, or other limits, at run
// time; its requests are decided and described by it until it is deleted
// (or its Until passes).
func ExampleLimiter_SetOverride() {
	lim, err := middleware.New(middleware.Dependencies{
		Clock: stoppedClock{},
	}, middleware.Policy{
		Plans: map[string]budget.Plan{
			"free": {Burst: 100, Rate: 100, Per: time.Hour},
			"pro":  {Burst: 10000, Rate: 10000, Per: time.Hour},
		},
		AnonymousPlan: "free",
		APIKeys:       map[string]identity.APIKey{"alice-key": {Principal: "alice", Plan: "free"}},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer lim.Close()
	api := lim.REST(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	call := func() {
		r := httptest.NewRequest(http.MethodGet, "/api/users/octocat", nil)
		r.Header.Set("Authorization", "Bearer alice-key")
		w := httptest.NewRecorder()
		api.ServeHTTP(w, r)
		fmt.Println(w.Header().Get(middleware.HeaderRateLimitPolicy), "remaining", w.Header().Get(middleware.HeaderXRateLimitRemaining))
	}
	ctx := context.Background()
	call()
	if err := lim.SetOverride(ctx, "alice", override.Override{Plan: "pro"}); err != nil {
		log.Fatal(err)
	}
	call()
	if err := lim.SetOverride(ctx, "alice", override.Override{Burst: 500, Rate: 500, Per: time.Hour}); err != nil {
		log.Fatal(err)
	}
	call()
	st, err := lim.Principal(ctx, "alice", "free")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(st.Plan, st.Override, st.Policies[0].Name, st.Policies[0].Remaining)
	if _, err := lim.DeleteOverride(ctx, "alice"); err != nil {
		log.Fatal(err)
	}
	call()
	// Output:
	// "free";q=100;w=3600 remaining 99
	// "pro";q=10000;w=3600 remaining 9999
	// "override:free";q=500;w=3600 remaining 499
	// free burst=500 rate=500 per=1h0m0s override:free 499
	// "free";q=100;w=3600 remaining 98
}
