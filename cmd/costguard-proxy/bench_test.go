package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"
)

// benchConfig is a plan no benchmark run exhausts.
const benchConfig = `
plans:
  anon: {burst: 1000000000, rate: 1000000000, per: 1s}
anonymous_plan: anon
`

// BenchmarkProxy is one query's round trip to graphql-yoga: directly,
// through a plain reverse proxy (httputil.ReverseProxy: forwarding and
// nothing else), and through costguard-proxy (parsed, validated, priced,
// debited, forwarded, its response priced and settled, extensions.cost
// and the rate-limit headers added). Their ratio is what pricing and
// budgeting add to a forwarding proxy:
//
//	go test -run '^$' -bench Proxy -benchtime 3000x -count 5 ./cmd/costguard-proxy
func BenchmarkProxy(b *testing.B) {
	up := startUpstream(b, "yoga.js")
	target, _ := url.Parse(up.URL)
	plain := httptest.NewServer(httputil.NewSingleHostReverseProxy(&url.URL{Scheme: target.Scheme, Host: target.Host}))
	defer plain.Close()
	p := startProxy(b, "-upstream", up.URL, "-schema", upstreamSchema, "-config", writeFile(b, "costguard.yaml", benchConfig))
	body := query(deepQuery, nil)
	paths := []struct{ name, url string }{
		{"direct", up.URL},
		{"reverseproxy", plain.URL + "/graphql"},
		{"costguard-proxy", p.URL + "/graphql"},
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	defer client.CloseIdleConnections()
	roundTrip := func(b *testing.B, url string) {
		resp, err := client.Post(url, "application/json", strings.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		out, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(out), `"alpha"`) {
			b.Fatalf("%d %s", resp.StatusCode, out)
		}
	}
	// Node compiles yoga's hot paths as they run: every path is warmed
	// before any is timed, so the first timed is not the slowest.
	for range 1000 {
		for _, path := range paths {
			roundTrip(b, path.url)
		}
	}
	for _, path := range paths {
		b.Run(path.name, func(b *testing.B) {
			for b.Loop() {
				roundTrip(b, path.url)
			}
		})
	}
}
