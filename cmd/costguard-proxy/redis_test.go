package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/internal/redistest"
	"github.com/costguard/costguard/middleware"
)

// sharedBudgetConfig gives one API key a budget of sharedBudgetOps
// operations priced sharedBudgetPrice, refunds off so each pays its whole
// price whatever it returns, refilled so slowly (a day) that no operation
// more is paid for while the test runs.
const sharedBudgetConfig = `
plans:
  anon: {burst: 100, rate: 100, per: 24h}
  team: {burst: 300, rate: 300, per: 24h, refund_unused: false}
anonymous_plan: anon
api_keys:
  team-key: {principal: acme, plan: team}
`

const (
	sharedBudgetOps   = 30
	sharedBudgetPrice = 10
	// sharedBudgetQuery is priced 10 (the user, 9 repositories) and
	// returns 3 repositories: actual cost 4, a refund were refunds on.
	sharedBudgetQuery = `{ user(login: "alice") { repos(first: 9) { id } } }`
)

// Two proxies on one Redis draw one client's operations from one budget:
// however the client's concurrent requests are spread over them, exactly
// the budget's worth is admitted in total, every admitted operation
// reaches the upstream and no refused one does.
func TestRedisTwoProxiesShareABudget(t *testing.T) {
	rs := redistest.StartServer(t)
	up := startUpstream(t, "yoga.js")
	config := writeFile(t, "costguard.yaml", sharedBudgetConfig)
	proxies := []*proxy{
		startProxy(t, "-upstream", up.URL, "-schema", upstreamSchema, "-config", config, "-redis", rs.Addr()),
		startProxy(t, "-upstream", up.URL, "-schema", upstreamSchema, "-config", config, "-redis", rs.Addr()),
	}
	body := query(sharedBudgetQuery, nil)

	const clients = 6
	var (
		mu       sync.Mutex
		admitted = make([]int, len(proxies)) // per proxy
		failures []string
	)
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			// Each client alternates between the proxies until one
			// refuses it: the budget refills too slowly to pay again.
			for i := c; ; i++ {
				n := i % len(proxies)
				a, err := tryPostGraphQL(proxies[n].URL+"/graphql", body, "Authorization", "Bearer team-key")
				mu.Lock()
				switch {
				case err != nil:
					failures = append(failures, err.Error())
				case a.status == http.StatusOK && len(a.Errors) == 0 && a.Extensions.Cost != nil &&
					a.Extensions.Cost.RequestedQueryCost == sharedBudgetPrice:
					admitted[n]++
					mu.Unlock()
					continue
				case a.status != http.StatusTooManyRequests || a.code() != budget.CodeRateLimited ||
					a.header.Get(middleware.HeaderRetryAfter) == "":
					failures = append(failures, fmt.Sprintf("proxy %d: %d %v %s, want 200 or 429 %s with Retry-After",
						n, a.status, a.header, a.body, budget.CodeRateLimited))
				}
				mu.Unlock()
				return
			}
		})
	}
	wg.Wait()
	for _, f := range failures {
		t.Error(f)
	}
	if total := admitted[0] + admitted[1]; total != sharedBudgetOps {
		t.Errorf("admitted %d operations (%v by proxy), want the budget's %d", total, admitted, sharedBudgetOps)
	}
	if admitted[0] == 0 || admitted[1] == 0 {
		t.Errorf("admitted %v by proxy: each proxy should have admitted some", admitted)
	}
	if hits := up.hits(t); hits != admitted[0]+admitted[1] {
		t.Errorf("the upstream executed %d operations, want the %d admitted", hits, admitted[0]+admitted[1])
	}

	// Both proxies now refuse the client, as the limiter does: 429,
	// Retry-After, RATE_LIMITED, and nothing sent upstream.
	before := up.hits(t)
	for n, p := range proxies {
		a := postGraphQL(t, p.URL+"/graphql", body, "Authorization", "Bearer team-key")
		if a.status != http.StatusTooManyRequests || a.code() != budget.CodeRateLimited {
			t.Errorf("proxy %d after the budget: %d %s, want 429 %s", n, a.status, a.body, budget.CodeRateLimited)
		}
		if s, err := strconv.Atoi(a.header.Get(middleware.HeaderRetryAfter)); err != nil || s < 1 {
			t.Errorf("proxy %d: Retry-After %q, want a positive number of seconds", n, a.header.Get(middleware.HeaderRetryAfter))
		}
	}
	if hits := up.hits(t); hits != before {
		t.Errorf("the upstream executed %d refused operations", hits-before)
	}
}

// tryPostGraphQL is postGraphQL for goroutines other than the test's: it
// returns its failure instead of ending the test.
func tryPostGraphQL(url, body string, header ...string) (*gqlAnswer, error) {
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	a := &gqlAnswer{status: resp.StatusCode, header: resp.Header, body: b}
	if len(b) > 0 && b[0] == '{' {
		if err := json.Unmarshal(b, a); err != nil {
			return nil, fmt.Errorf("answer %s: %w", b, err)
		}
	}
	return a, nil
}
