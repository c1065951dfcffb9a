package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/examples/federation/accounts"
	"github.com/costguard/costguard/examples/federation/reviews"
	"github.com/costguard/costguard/identity"
	"github.com/costguard/costguard/internal/redistest"
	"github.com/costguard/costguard/internal/tailbuf"
	"github.com/costguard/costguard/internal/testenv"
	"github.com/costguard/costguard/limiter/limitertest"
	"github.com/costguard/costguard/limiter/redisstore"
	"github.com/costguard/costguard/middleware"
)

// pluginDir is the Apollo gateway plugin, relative to this package.
var pluginDir = filepath.Join("..", "..", "clients", "apollo-gateway")

// The files of the plugin the test installs and runs: node_modules is
// installed into a copy by npm ci, from the committed lock file.
var pluginFiles = []string{"package.json", "package-lock.json", ".npmrc", "index.js",
	filepath.Join("example", "gateway.js"), filepath.Join("test", "plugin.test.js")}

// A query that both subgraphs answer: the user from accounts, their
// reviews from reviews (an _entities fetch).
const userWithReviews = `{ user(id: "1") { name reviews(first: 2) { body } } }`

// charges records what each subgraph's Limiter charged, net of refunds, by
// bucket key.
type charges struct {
	mu  sync.Mutex
	net map[string]map[string]int64 // subgraph -> bucket key -> points
}

func (c *charges) observer(subgraph string) middleware.Observer {
	return middleware.ObserverFunc(func(e *middleware.Event) {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.net[subgraph] == nil {
			c.net[subgraph] = map[string]int64{}
		}
		c.net[subgraph][e.Key] += e.Charged - e.Refunded + e.Excess
	})
}

// take returns what each subgraph charged key since the last take.
func (c *charges) take(key string) (accounts, reviews int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	accounts, reviews = c.net["accounts"][key], c.net["reviews"][key]
	delete(c.net["accounts"], key)
	delete(c.net["reviews"], key)
	return accounts, reviews
}

// federation is the test's deployment: two subgraphs, each behind a
// Limiter, on one Redis, and two gateways in front of them: one with
// costguard's data source and plugin, one plain.
type federation struct {
	accounts, reviews string // subgraph URLs
	gateway, plain    string // gateway URLs
	charges           *charges
}

// The Go side: Redis, the Limiters and the subgraphs.
func startSubgraphs(t *testing.T) *federation {
	rdb := redistest.StartServer(t).Client(t)
	// A clock that stands still: no point refills while the test runs, so
	// every difference it reads is a charge.
	clock := limitertest.NewFakeClock(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
	keys := map[string]identity.APIKey{
		"alice-key": {Principal: "alice", Plan: "free"},
		"bob-key":   {Principal: "bob", Plan: "free"},
		"carol-key": {Principal: "carol", Plan: "tiny"},
	}
	f := &federation{charges: &charges{net: map[string]map[string]int64{}}}
	for _, sg := range []struct {
		name string
		url  *string
		h    func() http.Handler
	}{
		{"accounts", &f.accounts, nil},
		{"reviews", &f.reviews, nil},
	} {
		store, err := redisstore.New(rdb, redisstore.Config{Clock: clock, ExpiryMargin: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { store.Close() })
		deps, policy := limiterConfig(store, keys, []string{"127.0.0.1/32"})
		policy.Plans = map[string]budget.Plan{
			"free": plans["free"],
			"anon": plans["anon"],
			// Room for the accounts part of userWithReviews, not for both.
			"tiny": {Burst: 3, Rate: 3, Per: time.Hour},
		}
		deps.Clock = clock
		deps.Observer = f.charges.observer(sg.name)
		lim, err := middleware.New(deps, policy)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { lim.Close() })
		schema := accounts.Schema()
		if sg.name == "reviews" {
			schema = reviews.Schema()
		}
		h, err := subgraph(schema, lim)
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(h) // 127.0.0.1, a free port
		t.Cleanup(srv.Close)
		*sg.url = srv.URL + "/query"
	}
	return f
}

// installPlugin copies the plugin into a temporary directory and installs
// its dependencies there with npm ci, from the lock file.
func installPlugin(t *testing.T) string {
	t.Helper()
	for _, bin := range []string{"node", "npm"} {
		if _, err := exec.LookPath(bin); err != nil {
			testenv.Missing(t, bin+" is not on PATH: the gateway test runs Apollo's gateway on Node")
		}
	}
	dir := t.TempDir()
	for _, name := range pluginFiles {
		b, err := os.ReadFile(filepath.Join(pluginDir, name))
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "npm", "ci", "--no-audit", "--no-fund", "--ignore-scripts", "--loglevel=error")
	cmd.Dir = dir
	start := time.Now()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm ci: %v\n%s", err, out)
	}
	t.Logf("npm ci: %v", time.Since(start).Round(time.Millisecond))
	return dir
}

// startGateway runs the example gateway with node in dir, in front of the
// subgraphs, and returns its URL once it serves; it is stopped (SIGTERM)
// when t ends.
func startGateway(t *testing.T, dir string, f *federation, extra ...string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	args := append([]string{filepath.Join("example", "gateway.js"), "--port", "0",
		"--subgraph", "accounts=" + f.accounts, "--subgraph", "reviews=" + f.reviews}, extra...)
	cmd := exec.CommandContext(ctx, "node", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "NODE_ENV=production")
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 10 * time.Second
	logs := &tailbuf.Buffer{Max: 16 << 10}
	cmd.Stderr = logs
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait() // SIGTERM: the gateway stops its server and exits
	})
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line := sc.Text()
			if u, ok := strings.CutPrefix(line, "gateway listening on "); ok {
				urls <- u
			}
			fmt.Fprintln(logs, line)
		}
		close(urls)
	}()
	select {
	case u, ok := <-urls:
		if !ok {
			t.Fatalf("the gateway exited before it served:\n%s", logs)
		}
		return u
	case <-time.After(60 * time.Second):
		t.Fatalf("the gateway did not serve within 60 s:\n%s", logs)
	}
	return ""
}

// clientFrom returns an HTTP client whose connections come from the
// loopback address ip (Linux routes all of 127.0.0.0/8 to lo).
func clientFrom(t *testing.T, ip string) *http.Client {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", "127.0.0.1:1") // nothing listens: only the bind matters
	if c != nil {
		c.Close()
	}
	if err != nil && strings.Contains(err.Error(), "assign requested address") {
		testenv.Missing(t, "cannot connect from "+ip+": the test's clients need the loopback range 127.0.0.0/8")
	}
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DialContext: d.DialContext}}
}

type response struct {
	status int
	header http.Header
	body   []byte
	errors []struct {
		Message    string         `json:"message"`
		Extensions map[string]any `json:"extensions"`
	}
}

// post sends query to url with the given headers.
func post(t *testing.T, c *http.Client, url, query string, headers ...string) response {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"query": query})
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r := response{status: resp.StatusCode, header: resp.Header}
	if r.body, err = io.ReadAll(resp.Body); err != nil {
		t.Fatal(err)
	}
	var decoded struct {
		Errors json.RawMessage `json:"errors"`
	}
	if err := json.Unmarshal(r.body, &decoded); err != nil {
		t.Fatalf("POST %s: %v\n%s", url, err, r.body)
	}
	if len(decoded.Errors) > 0 {
		if err := json.Unmarshal(decoded.Errors, &r.errors); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

// available reads a budget without spending it: GraphQL-Cost: validate,
// sent straight to the accounts subgraph from 127.0.0.1 (a trusted proxy),
// with the given identity headers (an API key, or X-Forwarded-For).
func (f *federation) available(t *testing.T, headers ...string) int64 {
	t.Helper()
	r := post(t, http.DefaultClient, f.accounts, "{ __typename }", append([]string{"GraphQL-Cost", "validate"}, headers...)...)
	var body struct {
		Extensions struct {
			Cost struct {
				ThrottleStatus struct {
					CurrentlyAvailable *int64 `json:"currentlyAvailable"`
				} `json:"throttleStatus"`
			} `json:"cost"`
		} `json:"extensions"`
	}
	if err := json.Unmarshal(r.body, &body); err != nil || body.Extensions.Cost.ThrottleStatus.CurrentlyAvailable == nil {
		t.Fatalf("validate %v: %d %s", headers, r.status, r.body)
	}
	return *body.Extensions.Cost.ThrottleStatus.CurrentlyAvailable
}

func key(k string) []string   { return []string{"Authorization", "Bearer " + k} }
func addr(ip string) []string { return []string{"X-Forwarded-For", ip} }

// Apollo's gateway (@apollo/gateway and @apollo/server from the npm
// registry, run by node) in front of two gqlgen federation subgraphs, each
// protected by costguard, sharing one Redis: with costguard's data source
// and plugin (clients/apollo-gateway) each user keeps one budget across
// the subgraphs, a client cannot choose whose budget it spends, and a
// subgraph's refusal reaches the client as a 429 with Retry-After. A plain
// gateway beside it shows what happens without them.
func TestGateway(t *testing.T) {
	testenv.Long(t)
	start := time.Now()
	dir := installPlugin(t)
	f := startSubgraphs(t)
	f.gateway = startGateway(t, dir, f)
	f.plain = startGateway(t, dir, f, "--plain")
	t.Logf("npm ci, Redis, two subgraphs and two gateways up in %v", time.Since(start).Round(time.Millisecond))

	user2, user3 := clientFrom(t, "127.0.0.2"), clientFrom(t, "127.0.0.3")

	t.Run("the plugin's unit tests", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, "node", "--test", "test/")
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("node --test: %v\n%s", err, out)
		}
	})

	t.Run("one budget per user across subgraphs", func(t *testing.T) {
		alice0, bob0 := f.available(t, key("alice-key")...), f.available(t, key("bob-key")...)
		r := post(t, user2, f.gateway, userWithReviews, key("alice-key")...)
		if r.status != http.StatusOK || len(r.errors) != 0 || !bytes.Contains(r.body, []byte(`"reviews":[{`)) {
			t.Fatalf("alice's query: %d %s", r.status, r.body)
		}
		x, y := f.charges.take("user:alice")
		if x != 1 || y != 3 { // docs/gateways.md's table
			t.Fatalf("accounts charged alice %d and reviews %d, want 1 and 3", x, y)
		}
		alice1, bob1 := f.available(t, key("alice-key")...), f.available(t, key("bob-key")...)
		t.Logf("alice: accounts charged %d, reviews %d; her budget %d -> %d; bob's %d -> %d", x, y, alice0, alice1, bob0, bob1)
		if alice1 != alice0-(x+y) || bob1 != bob0 {
			t.Errorf("alice %d -> %d (want -%d), bob %d -> %d (want unchanged)", alice0, alice1, x+y, bob0, bob1)
		}

		// Bob, from the same address as alice: his own budget.
		r = post(t, user2, f.gateway, userWithReviews, key("bob-key")...)
		if r.status != http.StatusOK || len(r.errors) != 0 {
			t.Fatalf("bob's query: %d %s", r.status, r.body)
		}
		bx, by := f.charges.take("user:bob")
		alice2, bob2 := f.available(t, key("alice-key")...), f.available(t, key("bob-key")...)
		t.Logf("bob: accounts charged %d, reviews %d; his budget %d -> %d; alice's %d -> %d", bx, by, bob1, bob2, alice1, alice2)
		if bob2 != bob1-(bx+by) || alice2 != alice1 || bx+by != x+y {
			t.Errorf("bob %d -> %d (charged %d+%d), alice %d -> %d (want unchanged)", bob1, bob2, bx, by, alice1, alice2)
		}
	})

	t.Run("a forged X-Forwarded-For is ignored", func(t *testing.T) {
		own0, forged0, gw0 := f.available(t, addr("127.0.0.2")...), f.available(t, addr("127.0.0.3")...), f.available(t, addr("127.0.0.1")...)
		// The client at 127.0.0.2 claims to be 127.0.0.3.
		r := post(t, user2, f.gateway, userWithReviews, "X-Forwarded-For", "127.0.0.3")
		if r.status != http.StatusOK || len(r.errors) != 0 {
			t.Fatalf("anonymous query: %d %s", r.status, r.body)
		}
		x, y := f.charges.take("ip:127.0.0.2")
		fx, fy := f.charges.take("ip:127.0.0.3")
		own1, forged1, gw1 := f.available(t, addr("127.0.0.2")...), f.available(t, addr("127.0.0.3")...), f.available(t, addr("127.0.0.1")...)
		t.Logf("127.0.0.2 claiming 127.0.0.3: 127.0.0.2 %d -> %d (accounts %d, reviews %d), 127.0.0.3 %d -> %d, the gateway's 127.0.0.1 %d -> %d",
			own0, own1, x, y, forged0, forged1, gw0, gw1)
		if x <= 0 || y <= 0 || own1 != own0-(x+y) || fx != 0 || fy != 0 || forged1 != forged0 || gw1 != gw0 {
			t.Errorf("the forged address was charged (%d+%d), or the client's own was not (%d+%d)", fx, fy, x, y)
		}

		// The same forgery sent straight to a subgraph: 127.0.0.2 is not
		// the gateway, so its header is not read at all.
		r = post(t, user2, f.reviews, `{ latestReviews(first: 1) { body } }`, "X-Forwarded-For", "127.0.0.3")
		if r.status != http.StatusOK {
			t.Fatalf("direct query: %d %s", r.status, r.body)
		}
		if _, fy := f.charges.take("ip:127.0.0.3"); fy != 0 {
			t.Errorf("a subgraph believed X-Forwarded-For from 127.0.0.2, which is not the gateway")
		}
		if _, y := f.charges.take("ip:127.0.0.2"); y <= 0 {
			t.Errorf("the direct query was not charged to 127.0.0.2")
		}

		// Two anonymous clients keep two budgets.
		r = post(t, user3, f.gateway, userWithReviews)
		if r.status != http.StatusOK {
			t.Fatalf("127.0.0.3's query: %d %s", r.status, r.body)
		}
		if x3, y3 := f.charges.take("ip:127.0.0.3"); x3+y3 != x+y {
			t.Errorf("127.0.0.3 was charged %d+%d, want %d+%d", x3, y3, x, y)
		}
	})

	t.Run("a plain gateway charges every user to its own address", func(t *testing.T) {
		f.charges.take("ip:127.0.0.1") // what loading the schema cost
		alice0, gw0 := f.available(t, key("alice-key")...), f.available(t, addr("127.0.0.1")...)
		r := post(t, user2, f.plain, userWithReviews, key("alice-key")...)
		if r.status != http.StatusOK {
			t.Fatalf("alice's query: %d %s", r.status, r.body)
		}
		x, y := f.charges.take("ip:127.0.0.1")
		alice1, gw1 := f.available(t, key("alice-key")...), f.available(t, addr("127.0.0.1")...)
		t.Logf("alice through a plain gateway: her budget %d -> %d, the gateway address's %d -> %d", alice0, alice1, gw0, gw1)
		if alice1 != alice0 || gw1 != gw0-(x+y) || x+y == 0 {
			t.Errorf("alice %d -> %d, gateway %d -> %d", alice0, alice1, gw0, gw1)
		}
	})

	t.Run("a subgraph's refusal is the client's 429", func(t *testing.T) {
		// carol's plan pays for the accounts part (1 point) but not the
		// reviews part: reviews refuses.
		r := post(t, user2, f.gateway, userWithReviews, key("carol-key")...)
		t.Logf("with the plugin: %d, Retry-After %q, RateLimit %q, RateLimit-Policy %q\n%s", r.status,
			r.header.Get("Retry-After"), r.header.Get("RateLimit"), r.header.Get("RateLimit-Policy"), r.body)
		if r.status != http.StatusTooManyRequests {
			t.Errorf("status %d, want 429", r.status)
		}
		if len(r.errors) == 0 {
			t.Fatalf("no errors: %s", r.body)
		}
		ext := r.errors[0].Extensions
		if ext["code"] != "RATE_LIMITED" {
			t.Errorf("errors[0].extensions.code = %v, want RATE_LIMITED", ext["code"])
		}
		retry, _ := ext["retryAfterSeconds"].(float64)
		// 1 point short at 3 an hour: 1200 s (docs/gateways.md).
		if h := r.header.Get("Retry-After"); retry != 1200 || h != strconv.Itoa(int(retry)) {
			t.Errorf("Retry-After %q, errors[0].extensions.retryAfterSeconds %v: want one positive number", h, ext["retryAfterSeconds"])
		}
		if got, want := r.header.Get("RateLimit"), `"tiny";r=2;t=1200`; got != want {
			t.Errorf("RateLimit %q, want %q", got, want)
		}
		if got, want := r.header.Get("RateLimit-Policy"), `"tiny";q=3;w=3600`; got != want {
			t.Errorf("RateLimit-Policy %q, want %q: the refusing budget", got, want)
		}
		if !bytes.Contains(r.body, []byte(`"data":{"user":null}`)) {
			t.Errorf("the data the gateway had is gone: %s", r.body)
		}
		for _, leak := range []string{f.reviews, strings.TrimPrefix(f.reviews, "http://"), "stacktrace"} {
			if bytes.Contains(r.body, []byte(leak)) {
				t.Errorf("the response holds %q", leak)
			}
		}

		// A key no subgraph knows: 401, UNKNOWN_API_KEY.
		u := post(t, user2, f.gateway, userWithReviews, key("no-such-key")...)
		if u.status != http.StatusUnauthorized || len(u.errors) == 0 || u.errors[0].Extensions["code"] != "UNKNOWN_API_KEY" {
			t.Errorf("an unknown key: %d %s", u.status, u.body)
		}

		// The plain gateway charges its own address's anonymous budget
		// (100 points): spend it until a subgraph refuses. The client
		// hears 200, INTERNAL_SERVER_ERROR, and the refusal deep inside
		// next to the subgraph's URL.
		var p response
		for range 5 {
			p = post(t, user2, f.plain, `{ latestReviews(first: 40) { body author { name } } }`)
			if len(p.errors) > 0 {
				break
			}
		}
		t.Logf("without: %d, Retry-After %q\n%s", p.status, p.header.Get("Retry-After"), p.body)
		if p.status != http.StatusOK || len(p.errors) == 0 || p.errors[0].Extensions["code"] != "INTERNAL_SERVER_ERROR" ||
			p.header.Get("Retry-After") != "" || !bytes.Contains(p.body, []byte(`"RATE_LIMITED"`)) ||
			!bytes.Contains(p.body, []byte(f.reviews)) {
			t.Errorf("the plain gateway answered %d %s", p.status, p.body)
		}
	})
}
