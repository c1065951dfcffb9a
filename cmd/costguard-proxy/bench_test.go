package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/costguard/costguard/cmd/costguard-proxy/internal/upstream"
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
//	go test -run '^$' -bench 'Proxy$' -benchtime 3000x -count 5 ./cmd/costguard-proxy
func BenchmarkProxy(b *testing.B) {
	up := startUpstream(b, "yoga.js")
	target, _ := url.Parse(up.URL)
	plain := httptest.NewServer(reverseProxy(target))
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

// largeQuery selects 40 × 25 labels (1,000 objects, about 40 KB of JSON):
// an operation whose upstream time dominates.
var largeQuery = func() string {
	var q strings.Builder
	q.WriteString("{")
	for i := range 40 {
		fmt.Fprintf(&q, " l%d: labels { name color }", i)
	}
	q.WriteString(" }")
	return q.String()
}()

// BenchmarkProxyLoad is the proxy's latency and throughput under load, in
// front of graphql-yoga, against calling yoga directly and through a
// plain reverse proxy (httputil.ReverseProxy: the hop alone). The load
// generator is this benchmark: clients goroutines, each sending its next
// request (a small query, or largeQuery) as soon as its last is answered,
// over keep-alive connections, b.N requests in all. Proxy, upstream and
// load share the machine. Each run reports the latency's p50 and p99 (µs)
// and the throughput (requests per second):
//
//	go test -run '^$' -bench ProxyLoad -benchtime 1500x -count 5 ./cmd/costguard-proxy
func BenchmarkProxyLoad(b *testing.B) {
	up := startUpstream(b, "yoga.js")
	p := startProxy(b, "-upstream", up.URL, "-schema", upstreamSchema, "-config", writeFile(b, "costguard.yaml", benchConfig))
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, MaxConnsPerHost: 64}}
	defer client.CloseIdleConnections()
	queries := []struct{ name, body string }{
		{"small", query(deepQuery, nil)},
		{"large", query(largeQuery, nil)},
	}
	target, _ := url.Parse(up.URL)
	plain := httptest.NewServer(reverseProxy(target))
	defer plain.Close()
	paths := []struct{ name, url string }{
		{"direct", up.URL},
		{"reverseproxy", plain.URL + "/graphql"},
		{"costguard-proxy", p.URL + "/graphql"},
	}
	roundTrip := func(b *testing.B, url, body string) {
		resp, err := client.Post(url, "application/json", strings.NewReader(body))
		if err != nil {
			b.Error(err)
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Errorf("status %d", resp.StatusCode)
		}
	}
	for range 500 { // Node compiles yoga's hot paths as they run
		for _, q := range queries {
			for _, path := range paths {
				roundTrip(b, path.url, q.body)
			}
		}
	}
	for _, q := range queries {
		for _, clients := range []int{1, 32} {
			for _, path := range paths {
				b.Run(fmt.Sprintf("%s/clients=%d/%s", q.name, clients, path.name), func(b *testing.B) {
					latencies := make([]time.Duration, b.N)
					var next atomic.Int64
					var wg sync.WaitGroup
					b.ResetTimer()
					start := time.Now()
					for range clients {
						wg.Add(1)
						go func() {
							defer wg.Done()
							for i := next.Add(1) - 1; i < int64(b.N); i = next.Add(1) - 1 {
								t0 := time.Now()
								roundTrip(b, path.url, q.body)
								latencies[i] = time.Since(t0)
							}
						}()
					}
					wg.Wait()
					elapsed := time.Since(start)
					b.StopTimer()
					slices.Sort(latencies)
					at := func(q float64) float64 {
						return float64(latencies[min(len(latencies)-1, int(q*float64(len(latencies))))].Microseconds())
					}
					b.ReportMetric(at(0.50), "p50-µs")
					b.ReportMetric(at(0.99), "p99-µs")
					b.ReportMetric(float64(b.N)/elapsed.Seconds(), "req/s")
				})
			}
		}
	}
}

// reverseProxy forwards to target's host and does nothing else, with as
// many connections kept open to it as costguard-proxy keeps.
func reverseProxy(target *url.URL) http.Handler {
	rp := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: target.Scheme, Host: target.Host})
	rp.Transport = upstream.NewClient(upstream.DefaultTimeout).Transport
	return rp
}
