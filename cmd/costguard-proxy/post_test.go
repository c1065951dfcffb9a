package main

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/costguard/costguard/cmd/costguard-proxy/internal/upstream"
)

// postConfig gives alice a plan that pays for every request of
// postCases, and anonymous clients one that the labels spend. Both refill
// a point an hour, so that two proxies asked a moment apart report the
// same budgets.
const postConfig = `
plans:
  large: {burst: 100000, rate: 1, per: 1h}
  anon: {burst: 100, rate: 1, per: 1h}
anonymous_plan: anon
api_keys:
  alice-key: {principal: alice, plan: large}
`

// postCase is one request of TestPOSTAnswersAsGqlgen.
type postCase struct {
	name, body string
	header     []string // name, value pairs
}

// postCases are the requests TestPOSTAnswersAsGqlgen sends through both
// transports, in this order: answered, refused by gqlgen, by the
// limiter's screen or by its budget.
func postCases() []postCase {
	alice := []string{"Authorization", "Bearer alice-key"}
	anonymous := []string{"X-Forwarded-For", "203.0.113.7"}
	cases := []postCase{
		{"deep query, refunded", query(deepQuery, nil), alice},
		{"variables and an interface", query(searchQuery, map[string]any{"t": "a"}), alice},
		{"a large answer", query(largeQuery, nil), alice},
		{"an error from the upstream", query(`mutation { createIssue(repo: "Repo:nope", title: "x") { id } }`, nil), alice},
		{"refused by the pricing", query(`{ user(login: "alice") { repos(first: 2) { issues(first: -1) { title } } } }`, nil), alice},
		{"__typename", query(`{ __typename }`, nil), alice},
		{"introspection", query(`{ __type(name: "Label") { name fields { name } } }`, nil), alice},
		{"operation name", `{"query":"query A { labels { name } } query B { __typename }","operationName":"B"}`, alice},
		{"validation error", query(`{ user(login: "alice") { nope } }`, nil), alice},
		{"parse error", query(`{ user(`, nil), alice},
		{"unknown operation name", `{"query":"query A { __typename }","operationName":"C"}`, alice},
		{"invalid JSON", `{"query": "{ labels { name } }"`, alice},
		{"not an object", `"{ labels { name } }"`, alice},
		{"query not a string", `{"query": 5}`, alice},
		{"variables not an object", `{"query": "{ __typename }", "variables": [1]}`, alice},
		{"trailing bytes", `{"query": "{ __typename }"} {}`, alice},
		{"over the plan", query(`{ user(login: "alice") { repos(first: 50) { issues(first: 50) { title } } } }`, nil), anonymous},
	}
	for i := range 5 { // 25 each: the fifth is refused
		cases = append(cases, postCase{"labels, anonymous, " + string(rune('1'+i)), query(labelsQuery, nil), anonymous})
	}
	return cases
}

// The proxy's POST transport answers every request as gqlgen's
// transport.POST does, under each Accept: the same status, Content-Type
// and rate-limit headers, and the same body byte for byte (yoga's data is
// compact, so json.Marshal leaves it as it came).
func TestPOSTAnswersAsGqlgen(t *testing.T) {
	if _, ok := options(&proxyFlags{}).POST.(upstream.POST); !ok {
		t.Fatal("the proxy does not serve POST with upstream.POST")
	}
	up := startUpstream(t, "yoga.js")
	gqlgens := options(&proxyFlags{})
	gqlgens.POST = nil
	for _, accept := range []string{"", "application/json", "application/graphql-response+json", "*/*"} {
		t.Run("Accept="+accept, func(t *testing.T) {
			cfg := writeFile(t, "costguard.yaml", postConfig) // fresh budgets for each
			args := []string{"-upstream", up.URL, "-schema", upstreamSchema, "-config", cfg}
			ours := startProxy(t, args...)
			theirs, err := runProxyWith(t, gqlgens, args...)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range postCases() {
				got := postOnce(t, ours.URL+"/graphql", accept, c)
				want := postOnce(t, theirs.URL+"/graphql", accept, c)
				if got.status != want.status || got.body != want.body {
					t.Errorf("%s: upstream.POST %d %s\ntransport.POST %d %s", c.name, got.status, got.body, want.status, want.body)
				}
				for _, h := range append([]string{"Content-Type", "Retry-After"}, rateLimitHeaders...) {
					if g, w := got.header.Values(h), want.header.Values(h); strings.Join(g, "\n") != strings.Join(w, "\n") {
						t.Errorf("%s: %s %q from upstream.POST, %q from transport.POST", c.name, h, g, w)
					}
				}
			}
		})
	}
}

// postAnswer is an answer as it came.
type postAnswer struct {
	status int
	header http.Header
	body   string
}

// postOnce posts c to url with accept (none when "").
func postOnce(t *testing.T, url, accept string, c postCase) postAnswer {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(c.body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	for i := 0; i+1 < len(c.header); i += 2 {
		req.Header.Set(c.header[i], c.header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return postAnswer{resp.StatusCode, resp.Header, string(b)}
}
