package serve

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/costguard/costguard/limiter/limitertest"
)

// The README's tour, in-process and on a stopped clock: the query is
// priced 61 and costs 14, so it fits 32 times in the anonymous plan's 500
// points; the 33rd waits 65 s.
func Example() {
	h, cleanup, err := newServer(defaultConfig(), deps{clock: limitertest.NewFakeClock(time.Unix(1_800_000_000, 0))})
	if err != nil {
		panic(err)
	}
	defer cleanup()

	// Priced 61, it actually costs 14 (octocat's 4 repositories hold 9
	// issues): 47 points come back each time, until fewer than 61 are left.
	body := `{"query":"{ user(login: \"octocat\") { repos(first: 10) { issues(first: 5) { title } } } }"}`
	for i := range 33 {
		r := httptest.NewRequest(http.MethodPost, "/graphql", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		line := fmt.Sprintf("%d RateLimit: %s", w.Code, w.Header().Get("RateLimit"))
		if ra := w.Header().Get("Retry-After"); ra != "" {
			line += " Retry-After: " + ra
		}
		if i < 2 || i >= 31 {
			fmt.Println(line)
		}
	}
	// Output:
	// 200 RateLimit: "anon";r=486;t=101
	// 200 RateLimit: "anon";r=472;t=202
	// 200 RateLimit: "anon";r=52;t=3226
	// 429 RateLimit: "anon";r=52;t=3226 Retry-After: 65
}
