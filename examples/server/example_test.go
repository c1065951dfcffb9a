package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/costguard/costguard/limiter/limitertest"
)

// The README's session, in-process and on a stopped clock: eight 61-point
// queries fit in the anonymous plan's 500 points, the ninth waits 353 s.
func Example() {
	h, cleanup, err := newServer(defaultConfig(), deps{clock: limitertest.NewFakeClock(time.Unix(1_800_000_000, 0))})
	if err != nil {
		panic(err)
	}
	defer cleanup()

	body := `{"query":"{ user(login: \"octocat\") { repos(first: 10) { issues(first: 5) { title } } } }"}`
	for range 9 {
		r := httptest.NewRequest(http.MethodPost, "/graphql", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		line := fmt.Sprintf("%d RateLimit: %s", w.Code, w.Header().Get("RateLimit"))
		if ra := w.Header().Get("Retry-After"); ra != "" {
			line += " Retry-After: " + ra
		}
		fmt.Println(line)
	}
	// Output:
	// 200 RateLimit: "anon";r=439;t=440
	// 200 RateLimit: "anon";r=378;t=879
	// 200 RateLimit: "anon";r=317;t=1318
	// 200 RateLimit: "anon";r=256;t=1757
	// 200 RateLimit: "anon";r=195;t=2196
	// 200 RateLimit: "anon";r=134;t=2636
	// 200 RateLimit: "anon";r=73;t=3075
	// 200 RateLimit: "anon";r=12;t=3514
	// 429 RateLimit: "anon";r=12;t=3514 Retry-After: 353
}
