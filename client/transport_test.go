package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

const (
	queryDoc    = "query Repos { user(login: \"alice\") { repos(first: 10) { name } } }"
	mutationDoc = "mutation Open { createIssue(repo: \"wonderland\", title: \"t\") { id } }"
)

// budgetHeaders are the headers of an reply on a plan of limit points
// filling in window seconds, remaining left.
func budgetHeaders(limit, window, remaining int64) map[string]string {
	return map[string]string{
		"RateLimit-Policy":      fmt.Sprintf(`"free";q=%d;w=%d`, limit, window),
		"RateLimit":             fmt.Sprintf(`"free";r=%d;t=%d`, remaining, window),
		"X-RateLimit-Limit":     fmt.Sprint(limit),
		"X-RateLimit-Remaining": fmt.Sprint(remaining),
	}
}

// costBody is a 200's body with extensions.cost.
func costBody(price, limit, remaining int64, rate float64) string {
	return fmt.Sprintf(`{"data":{"ok":true},"extensions":{"cost":{"requestedQueryCost":%d,"actualQueryCost":%d,`+
		`"throttleStatus":{"maximumAvailable":%d,"currentlyAvailable":%d,"restoreRate":%g}}}}`, price, price, limit, remaining, rate)
}

// refusal is a 429 RATE_LIMITED with Retry-After seconds, without
// budget headers.
func refusal(seconds int) reply {
	return reply{status: 429, header: map[string]string{"Retry-After": fmt.Sprint(seconds)},
		body: fmt.Sprintf(`{"errors":[{"message":"rate limited","extensions":{"code":"RATE_LIMITED","cost":11,"retryAfterSeconds":%d}}]}`, seconds)}
}

var ok200 = reply{status: 200, body: `{"data":{"ok":true}}`}

func TestDefaults(t *testing.T) {
	var tr Transport
	if got := tr.maxWait(); got != 30*time.Second {
		t.Errorf("MaxWait 0 waits at most %s, want 30s", got)
	}
	if got := tr.maxRetries(); got != 3 {
		t.Errorf("MaxRetries 0 retries %d times, want 3", got)
	}
	if got := tr.retryBudget(); got != 0.1 {
		t.Errorf("RetryBudget 0 is %g, want 0.1", got)
	}
	if got := tr.base(); got != http.DefaultTransport {
		t.Errorf("Base nil sends through %v, want http.DefaultTransport", got)
	}
	tr = Transport{MaxRetries: -1, RetryBudget: -1}
	if tr.maxRetries() != 0 || tr.retryBudget() != 0 {
		t.Errorf("negative MaxRetries and RetryBudget give %d and %g, want none", tr.maxRetries(), tr.retryBudget())
	}
}

// docs/clients.md states the defaults the code has.
func TestDocumentedDefaults(t *testing.T) {
	doc, err := os.ReadFile("../docs/clients.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		fmt.Sprintf("| `MaxWait` | %d s |", int(defaultMaxWait/time.Second)),
		fmt.Sprintf("| `MaxRetries` | %d (negative: none) |", defaultMaxRetries),
		fmt.Sprintf("| `RetryBudget` | %g | retries earned per request, across requests (at most %d saved) |", defaultRetryBudget, maxRetryTokens),
		fmt.Sprintf("MaxWait %d s, MaxRetries %d, RetryBudget %g", int(defaultMaxWait/time.Second), defaultMaxRetries, defaultRetryBudget),
		fmt.Sprintf("bodies up to %d MiB", maxBodyBytes>>20),
		"lengthens every wait by up to a fifth",
	} {
		if !strings.Contains(string(doc), want) {
			t.Errorf("docs/clients.md no longer says %q", want)
		}
	}
	if jitterShare != 0.2 {
		t.Errorf("jitterShare = %g; the docs say a fifth", jitterShare)
	}
}

// A price learned from an reply makes the next send of the same
// operation wait until the view has room for it: never before the full
// refill rate could have brought it, never past the bucket being full.
func TestWaitsForLearnedPrice(t *testing.T) {
	// 100 points filling in 100 s (1 point/s); 10 left after a 20-point query.
	first := reply{status: 200, header: budgetHeaders(100, 100, 10), body: costBody(20, 100, 10, 1)}
	tr, srv, clk, c := newFake([]reply{first}, 0)
	if r, _ := drive(t, clk, do(c, gqlRequest(t, queryDoc, "Repos")), 0); r.err != nil {
		t.Fatal(r.err)
	}
	r, waits := drive(t, clk, do(c, gqlRequest(t, queryDoc, "Repos")), 10)
	if r.err != nil {
		t.Fatal(r.err)
	}
	sent := srv.sends()
	if len(waits) == 0 {
		t.Fatal("the second send did not wait")
	}
	if gap := sent[1].Sub(sent[0]); gap < 10*time.Second || gap > 90*time.Second {
		t.Errorf("the second send came %s after the first, want between 10s (20 points at 1 point/s from 10) and 90s (the bucket full)", gap)
	}
	if got := tr.View().Prices["Repos"]; got != 20 {
		t.Errorf("View().Prices[Repos] = %d, want 20", got)
	}
}

// A price the caller gives comes before any learned one.
func TestWaitsForCallerPrice(t *testing.T) {
	first := reply{status: 200, header: budgetHeaders(100, 100, 10), body: costBody(1, 100, 10, 1)}
	tr, srv, clk, c := newFake([]reply{first}, 0)
	tr.MaxWait = 10 * time.Minute
	drive(t, clk, do(c, gqlRequest(t, queryDoc, "Repos")), 0)
	// The next send of a cheap operation fits at once.
	drive(t, clk, do(c, gqlRequest(t, queryDoc, "Repos")), 0)
	req := gqlRequest(t, queryDoc, "Repos")
	req = req.WithContext(WithPrice(req.Context(), 60))
	if r, _ := drive(t, clk, do(c, req), 10); r.err != nil {
		t.Fatal(r.err)
	}
	sent := srv.sends()
	if gap := sent[2].Sub(sent[1]); gap < 50*time.Second {
		t.Errorf("a 60-point request with 9 points left was sent after %s, want at least 51s at 1 point/s", gap)
	}
	// Past MaxWait the view is only an estimate: the server decides.
	tr.MaxWait = 20 * time.Second
	req = gqlRequest(t, queryDoc, "Repos")
	drive(t, clk, do(c, req.WithContext(WithPrice(req.Context(), 60))), 10)
	if sent := srv.sends(); sent[3].Sub(sent[2]) != 20*time.Second {
		t.Errorf("with MaxWait 20s, sent after %s, want 20s", sent[3].Sub(sent[2]))
	}
}

// A refused query is sent again after Retry-After, lengthened by at most
// a fifth at random, never less.
func TestHonoursRetryAfter(t *testing.T) {
	for _, rnd := range []float64{0, 0.5, 0.999} {
		_, srv, clk, c := newFake([]reply{refusal(7), ok200}, rnd)
		r, _ := drive(t, clk, do(c, gqlRequest(t, queryDoc, "Repos")), 10)
		if r.err != nil || r.resp.StatusCode != 200 {
			t.Fatalf("rand %g: got %v, %v; want the retry's 200", rnd, r.resp, r.err)
		}
		sent := srv.sends()
		gap := sent[1].Sub(sent[0])
		want := 7*time.Second + time.Duration(float64(7*time.Second)*jitterShare*rnd)
		if gap != want || gap < 7*time.Second || gap > 7*time.Second*6/5 {
			t.Errorf("rand %g: retried after %s, want %s, within [7s, 8.4s]", rnd, gap, want)
		}
	}
}

// retryAfterSeconds in the body counts when longer than the header.
func TestRetryAfterSecondsInBody(t *testing.T) {
	a := refusal(9)
	a.header["Retry-After"] = "2"
	_, srv, clk, c := newFake([]reply{a, ok200}, 0)
	drive(t, clk, do(c, gqlRequest(t, queryDoc, "Repos")), 10)
	if sent := srv.sends(); sent[1].Sub(sent[0]) < 9*time.Second {
		t.Errorf("retried after %s, want 9s (retryAfterSeconds)", sent[1].Sub(sent[0]))
	}
}

func TestMutationNotRetried(t *testing.T) {
	_, srv, clk, c := newFake([]reply{refusal(1), ok200}, 0)
	r, _ := drive(t, clk, do(c, gqlRequest(t, mutationDoc, "Open")), 10)
	if r.err != nil || r.resp.StatusCode != 429 || !strings.Contains(r.body, "RATE_LIMITED") {
		t.Fatalf("got %v %q, %v; want the 429 and its body", r.resp, r.body, r.err)
	}
	if n := len(srv.sends()); n != 1 {
		t.Errorf("the mutation was sent %d times, want once", n)
	}
}

func TestSafeMutationRetried(t *testing.T) {
	_, srv, clk, c := newFake([]reply{refusal(1), ok200}, 0)
	req := gqlRequest(t, mutationDoc, "Open")
	req = req.WithContext(WithRetrySafe(req.Context()))
	r, _ := drive(t, clk, do(c, req), 10)
	if r.err != nil || r.resp.StatusCode != 200 {
		t.Fatalf("got %v, %v; want the retry's 200", r.resp, r.err)
	}
	sent, bodies := srv.sends(), srv.bodies
	if len(sent) != 2 || bodies[0] != bodies[1] {
		t.Errorf("sent %d times, bodies %q; want twice, the same body", len(sent), bodies)
	}
}

func TestMaxCostExceededNotRetried(t *testing.T) {
	never := reply{status: 400, header: map[string]string{"Retry-After": "1"},
		body: `{"errors":[{"message":"too expensive","extensions":{"code":"MAX_COST_EXCEEDED","cost":5000}}]}`}
	_, srv, clk, c := newFake([]reply{never}, 0)
	for range 2 {
		r, waits := drive(t, clk, do(c, gqlRequest(t, queryDoc, "Repos")), 0)
		if r.err != nil || r.resp.StatusCode != 400 || !strings.Contains(r.body, "MAX_COST_EXCEEDED") || len(waits) > 0 {
			t.Fatalf("got %v %q, %v after waits %v; want the 400 at once", r.resp, r.body, r.err, waits)
		}
	}
	if n := len(srv.sends()); n != 2 {
		t.Errorf("two requests were sent %d times, want twice", n)
	}
}

// An operation priced above the plan, refused RATE_LIMITED because the
// bucket cannot pay even the refusal's InvalidCost, never fits: it is not
// retried after the Retry-After, where the server would say
// MAX_COST_EXCEEDED.
func TestPricedAbovePlanNotRetried(t *testing.T) {
	h := budgetHeaders(10, 600, 0)
	h["Retry-After"] = "5"
	drained := reply{status: 429, header: h,
		body: `{"errors":[{"message":"rate limited","extensions":{"code":"RATE_LIMITED","cost":11,"retryAfterSeconds":5}}]}`}
	_, srv, clk, c := newFake([]reply{drained}, 0)
	r, waits := drive(t, clk, do(c, gqlRequest(t, queryDoc, "Repos")), 0)
	if r.err != nil || r.resp.StatusCode != 429 || len(waits) > 0 {
		t.Fatalf("got %v %q, %v after waits %v; want the 429 at once", r.resp, r.body, r.err, waits)
	}
	if n := len(srv.sends()); n != 1 {
		t.Errorf("sent %d times, want once", n)
	}

	// The same refusal of an operation the plan can hold is retried.
	h = budgetHeaders(100, 600, 0)
	h["Retry-After"] = "5"
	fits := reply{status: 429, header: h,
		body: `{"errors":[{"message":"rate limited","extensions":{"code":"RATE_LIMITED","cost":11,"retryAfterSeconds":5}}]}`}
	ok := reply{status: 200, header: budgetHeaders(100, 600, 89), body: costBody(11, 100, 89, 1)}
	_, srv, clk, c = newFake([]reply{fits, ok}, 0)
	r, _ = drive(t, clk, do(c, gqlRequest(t, queryDoc, "Repos")), 10)
	if r.err != nil || r.resp.StatusCode != 200 || len(srv.sends()) != 2 {
		t.Fatalf("got %v, %v after %d sends; want the 200 on the retry", r.resp, r.err, len(srv.sends()))
	}
}

func TestContextCancelStopsWait(t *testing.T) {
	first := reply{status: 200, header: budgetHeaders(100, 100, 0), body: costBody(1, 100, 0, 1)}
	_, srv, clk, c := newFake([]reply{first}, 0)
	drive(t, clk, do(c, gqlRequest(t, queryDoc, "Other")), 0)
	ctx, cancel := context.WithCancel(context.Background())
	req := gqlRequest(t, queryDoc, "Repos").WithContext(WithPrice(ctx, 50))
	done := do(c, req)
	<-clk.sleeping
	cancel()
	r := <-done
	if !errors.Is(r.err, context.Canceled) {
		t.Errorf("got %v, want context.Canceled", r.err)
	}
	if n := len(srv.sends()); n != 1 {
		t.Errorf("%d sends, want only the first", n)
	}
}

// A refused request whose context ends while it waits to be retried
// returns the refusal.
func TestContextCancelDuringRetryWait(t *testing.T) {
	_, srv, clk, c := newFake([]reply{refusal(5), ok200}, 0)
	ctx, cancel := context.WithCancel(context.Background())
	done := do(c, gqlRequest(t, queryDoc, "Repos").WithContext(ctx))
	<-clk.sleeping
	cancel()
	r := <-done
	if r.err != nil || r.resp.StatusCode != 429 || !strings.Contains(r.body, "RATE_LIMITED") {
		t.Errorf("got %v %q, %v; want the 429 and its body", r.resp, r.body, r.err)
	}
	if n := len(srv.sends()); n != 1 {
		t.Errorf("%d sends, want 1", n)
	}
}

func TestRetryBudgetExhausts(t *testing.T) {
	tr, srv, clk, c := newFake([]reply{refusal(1)}, 0)
	tr.MaxRetries = 100
	r, _ := drive(t, clk, do(c, gqlRequest(t, queryDoc, "Repos")), 100)
	if r.err != nil || r.resp.StatusCode != 429 {
		t.Fatalf("got %v, %v; want the last 429", r.resp, r.err)
	}
	if n := len(srv.sends()); n != 1+maxRetryTokens {
		t.Errorf("sent %d times, want %d (the allowance of %d retries)", n, 1+maxRetryTokens, maxRetryTokens)
	}
	drive(t, clk, do(c, gqlRequest(t, queryDoc, "Repos")), 100)
	if n := len(srv.sends()); n != 2+maxRetryTokens {
		t.Errorf("the next request was sent %d times, want once (0.1 retry earned)", n-1-maxRetryTokens)
	}
}

func TestMaxRetries(t *testing.T) {
	tr, srv, clk, c := newFake([]reply{refusal(1)}, 0)
	tr.MaxRetries = 2
	drive(t, clk, do(c, gqlRequest(t, queryDoc, "Repos")), 100)
	if n := len(srv.sends()); n != 3 {
		t.Errorf("sent %d times, want 3", n)
	}
}

// A Retry-After longer than MaxWait is not waited for: the refusal is
// returned.
func TestRetryAfterPastMaxWait(t *testing.T) {
	tr, srv, clk, c := newFake([]reply{refusal(60), ok200}, 0)
	tr.MaxWait = 10 * time.Second
	r, waits := drive(t, clk, do(c, gqlRequest(t, queryDoc, "Repos")), 10)
	if r.err != nil || r.resp.StatusCode != 429 || len(waits) > 0 || len(srv.sends()) != 1 {
		t.Errorf("got %v, %v after %d sends and waits %v; want the 429 at once", r.resp, r.err, len(srv.sends()), waits)
	}
}

// A refusal that is not about the price (OVERLOADED) holds every request
// until its Retry-After runs out; one that cannot wait that long fails
// unsent.
func TestHoldAfterOverload(t *testing.T) {
	overloaded := reply{status: 503, header: map[string]string{"Retry-After": "5"},
		body: `{"errors":[{"message":"overloaded","extensions":{"code":"OVERLOADED","retryAfterSeconds":5}}]}`}
	tr, srv, clk, c := newFake([]reply{overloaded, ok200}, 0)
	r, _ := drive(t, clk, do(c, gqlRequest(t, mutationDoc, "Open")), 0)
	if r.resp == nil || r.resp.StatusCode != 503 {
		t.Fatalf("got %v, %v; want the 503", r.resp, r.err)
	}
	if hold := tr.View().Hold; !hold.Equal(srv.sends()[0].Add(5 * time.Second)) {
		t.Errorf("View().Hold = %s, want 5s after the refusal", hold)
	}
	tr.MaxWait = 2 * time.Second
	if r, _ := drive(t, clk, do(c, gqlRequest(t, queryDoc, "Repos")), 0); !errors.Is(r.err, ErrRetryAfter) {
		t.Errorf("with MaxWait 2s: got %v, want ErrRetryAfter", r.err)
	}
	tr.MaxWait = 0
	drive(t, clk, do(c, gqlRequest(t, queryDoc, "Repos")), 10)
	sent := srv.sends()
	if len(sent) != 2 || sent[1].Sub(sent[0]) < 5*time.Second {
		t.Errorf("sends at %v, want two, 5s apart", sent)
	}
}

// Requests whose body cannot be read again are never retried.
func TestNoGetBodyNotRetried(t *testing.T) {
	_, srv, clk, c := newFake([]reply{refusal(1), ok200}, 0)
	req := gqlRequest(t, queryDoc, "Repos")
	req.GetBody = nil
	r, _ := drive(t, clk, do(c, req), 10)
	if r.err != nil || r.resp.StatusCode != 429 || len(srv.sends()) != 1 {
		t.Errorf("got %v, %v after %d sends; want the 429, sent once", r.resp, r.err, len(srv.sends()))
	}
}

// REST: GET is retried, POST is not.
func TestRESTRetries(t *testing.T) {
	rest := reply{status: 429, ctype: "application/json; charset=utf-8", header: map[string]string{"Retry-After": "2"},
		body: `{"error":"rate_limited","retry_after_seconds":2}`}
	for _, method := range []string{"GET", "POST"} {
		_, srv, clk, c := newFake([]reply{rest, ok200}, 0)
		req, _ := http.NewRequest(method, "http://api.test/api/search?q=go", strings.NewReader(""))
		drive(t, clk, do(c, req), 10)
		want := map[string]int{"GET": 2, "POST": 1}[method]
		if n := len(srv.sends()); n != want {
			t.Errorf("%s sent %d times, want %d", method, n, want)
		}
	}
}

func TestBodyStillReadable(t *testing.T) {
	body := costBody(11, 5000, 4989, 1.3888888888888888)
	tr, _, clk, c := newFake([]reply{{status: 200, header: budgetHeaders(5000, 3600, 4989), body: body}}, 0)
	r, _ := drive(t, clk, do(c, gqlRequest(t, queryDoc, "Repos")), 0)
	if r.err != nil || r.body != body {
		t.Fatalf("the caller read %q, %v; want %q", r.body, r.err, body)
	}
	v := tr.View()
	if len(v.Policies) != 1 || v.Policies[0].Remaining != 4989 || v.Policies[0].Limit != 5000 || v.Prices["Repos"] != 11 {
		t.Errorf("View() = %+v, want free with 4989 of 5000 left and Repos at 11", v)
	}
}

func TestLargeBodyPassesThrough(t *testing.T) {
	for _, size := range []int{maxBodyBytes, maxBodyBytes + 1, 3 * maxBodyBytes} {
		_, _, clk, c := newFake([]reply{{status: 200, size: size}}, 0)
		r, _ := drive(t, clk, do(c, gqlRequest(t, queryDoc, "Repos")), 0)
		if r.err != nil || len(r.body) != size || !strings.HasSuffix(r.body, `"}}`) {
			t.Errorf("size %d: the caller read %d bytes, %v", size, len(r.body), r.err)
		}
	}
}

// A body the caller reads in part, and one that is not JSON, are passed on
// as they are.
func TestOtherBodiesUntouched(t *testing.T) {
	_, _, clk, c := newFake([]reply{{status: 200, ctype: "text/event-stream", body: "data: {}\n\n"}}, 0)
	r, _ := drive(t, clk, do(c, gqlRequest(t, queryDoc, "Repos")), 0)
	if r.body != "data: {}\n\n" {
		t.Errorf("the caller read %q", r.body)
	}
}

func TestMalformedSignalsIgnored(t *testing.T) {
	bad := reply{status: 429, header: map[string]string{
		"RateLimit-Policy":      `garbage;;;, "x;q=abc, ;q=5, "free";q=-1;w=1e9`,
		"RateLimit":             `"free";r=-5;t=x`,
		"X-RateLimit-Limit":     "-1",
		"X-RateLimit-Remaining": "lots",
		"X-RateLimit-Reset":     "99999999999999999999",
		"Retry-After":           "soon",
	}, body: `{"errors":"not a list","extensions":{"cost":"free"}}`}
	tr, srv, clk, c := newFake([]reply{bad, ok200}, 0)
	r, waits := drive(t, clk, do(c, gqlRequest(t, queryDoc, "Repos")), 0)
	if r.err != nil || r.resp.StatusCode != 429 || len(waits) > 0 || len(srv.sends()) != 1 {
		t.Errorf("got %v, %v after waits %v; want the 429 at once, unretried (no wait given)", r.resp, r.err, waits)
	}
	if v := tr.View(); len(v.Policies) != 0 || len(v.Prices) != 0 {
		t.Errorf("View() = %+v, want nothing known", v)
	}
	if r, waits := drive(t, clk, do(c, gqlRequest(t, queryDoc, "Repos")), 0); r.err != nil || len(waits) > 0 {
		t.Errorf("the next request: %v after waits %v", r.err, waits)
	}
}

// A transport error is returned as it is, and nothing stays in flight.
func TestBaseError(t *testing.T) {
	clk := newFakeClock()
	tr := &Transport{Base: roundTripFunc(func(*http.Request) (*http.Response, error) { return nil, io.ErrUnexpectedEOF }), clock: clk}
	_, err := tr.RoundTrip(gqlRequest(t, queryDoc, "Repos"))
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("got %v", err)
	}
	if tr.pace.inflight != 0 {
		t.Errorf("%d points still in flight", tr.pace.inflight)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// Which refusals hold every request: a 429 without a code does, a
// route's limit does not.
func TestHoldsOnlyForEveryRequest(t *testing.T) {
	for _, tc := range []struct {
		name string
		r    reply
		want bool
	}{
		{"no code", reply{status: 429, ctype: "text/plain", header: map[string]string{"Retry-After": "3"}, body: "slow down"}, true},
		{"route limit", reply{status: 429, ctype: "application/json", header: map[string]string{"Retry-After": "3"},
			body: `{"error":"route_rate_limited","retry_after_seconds":3}`}, false},
		{"quota", reply{status: 429, header: map[string]string{"Retry-After": "3"},
			body: `{"errors":[{"message":"quota","extensions":{"code":"QUOTA_EXCEEDED","retryAfterSeconds":3}}]}`}, true},
		{"rate limited", refusal(3), false},
	} {
		tr, _, clk, c := newFake([]reply{tc.r}, 0)
		req, _ := http.NewRequest("POST", "http://api.test/api/login", strings.NewReader("{}"))
		drive(t, clk, do(c, req), 0)
		if held := !tr.View().Hold.IsZero(); held != tc.want {
			t.Errorf("%s: held %v, want %v", tc.name, held, tc.want)
		}
	}
}

// The jitter is cut at MaxWait, never the Retry-After itself.
func TestJitterCutAtMaxWait(t *testing.T) {
	tr, srv, clk, c := newFake([]reply{refusal(7), ok200}, 0.999)
	tr.MaxWait = 8 * time.Second
	drive(t, clk, do(c, gqlRequest(t, queryDoc, "Repos")), 10)
	sent := srv.sends()
	if len(sent) != 2 || sent[1].Sub(sent[0]) != 8*time.Second {
		t.Errorf("sends %v, want two 8s apart", sent)
	}
}

// The policies after the plan's are kept for View, with what RateLimit
// says of them.
func TestViewKeepsOtherPolicies(t *testing.T) {
	h := budgetHeaders(500, 3600, 497)
	h["RateLimit-Policy"] = `"anon";q=500;w=3600, "POST /api/login";q=5;w=900`
	h["RateLimit"] = `"POST /api/login";r=4;t=180`
	tr, _, clk, c := newFake([]reply{{status: 401, ctype: "application/json", header: h, body: `{"error":"invalid_credentials"}`}}, 0)
	req, _ := http.NewRequest("POST", "http://api.test/api/login", strings.NewReader("{}"))
	drive(t, clk, do(c, req), 0)
	v := tr.View()
	if len(v.Policies) != 2 {
		t.Fatalf("View().Policies = %+v, want anon and the login route", v.Policies)
	}
	plan, route := v.Policies[0], v.Policies[1]
	if plan.Name != "anon" || plan.Remaining != 497 || plan.Limit != 500 || plan.Window != time.Hour {
		t.Errorf("the plan's policy: %+v", plan)
	}
	if route.Name != "POST /api/login" || route.Remaining != 4 || route.Limit != 5 || !route.Reset.Equal(clk.Now().Add(180*time.Second)) {
		t.Errorf("the route's policy: %+v", route)
	}
}

// closeCounter is a request body that counts its Close calls.
type closeCounter struct {
	io.Reader
	closed int
}

func (b *closeCounter) Close() error {
	b.closed++
	return nil
}

// countClose replaces req's body with one that counts its Close calls.
func countClose(req *http.Request) *closeCounter {
	b := &closeCounter{Reader: req.Body}
	req.Body = b
	return b
}

// A request the Transport does not send (an earlier refusal holds it past
// MaxWait, or its context ends while it waits) has its body closed, as an
// http.RoundTripper must.
func TestBodyClosedWhenNotSent(t *testing.T) {
	overloaded := reply{status: 503, header: map[string]string{"Retry-After": "5"},
		body: `{"errors":[{"message":"overloaded","extensions":{"code":"OVERLOADED","retryAfterSeconds":5}}]}`}
	tr, srv, clk, c := newFake([]reply{overloaded}, 0)
	drive(t, clk, do(c, gqlRequest(t, mutationDoc, "Open")), 0)

	tr.MaxWait = 2 * time.Second
	req := gqlRequest(t, queryDoc, "Repos")
	body := countClose(req)
	if r, _ := drive(t, clk, do(c, req), 0); !errors.Is(r.err, ErrRetryAfter) {
		t.Fatalf("got %v, want ErrRetryAfter", r.err)
	}
	if body.closed == 0 {
		t.Error("the body of a request failed with ErrRetryAfter was not closed")
	}

	tr.MaxWait = time.Minute
	ctx, cancel := context.WithCancel(context.Background())
	req = gqlRequest(t, queryDoc, "Repos").WithContext(ctx)
	body = countClose(req)
	done := do(c, req)
	<-clk.sleeping
	cancel()
	if r := <-done; !errors.Is(r.err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", r.err)
	}
	if body.closed == 0 {
		t.Error("the body of a request cancelled while it waited was not closed")
	}
	if n := len(srv.sends()); n != 1 {
		t.Errorf("%d sends, want only the first", n)
	}
}

// The body's signals are read under either GraphQL media type: the price
// and the bucket of a 200's extensions.cost, and a refusal's code and
// retryAfterSeconds in a 400 or a 429 (here without Retry-After, so that
// only the body gives the wait).
func TestSignalsUnderEitherMediaType(t *testing.T) {
	rateLimited := `{"errors":[{"message":"rate limited","extensions":{"code":"RATE_LIMITED","cost":11,"retryAfterSeconds":4}}]}`
	for _, ctype := range []string{"application/json", "application/json; charset=utf-8", "application/graphql-response+json"} {
		tr, _, clk, c := newFake([]reply{{status: 200, ctype: ctype, body: costBody(20, 100, 10, 1)}}, 0)
		drive(t, clk, do(c, gqlRequest(t, queryDoc, "Repos")), 0)
		if v := tr.View(); v.Prices["Repos"] != 20 || len(v.Policies) != 1 || v.Policies[0].Remaining != 10 || v.Policies[0].Limit != 100 {
			t.Errorf("%s, 200: View() = %+v, want Repos at 20 and 10 of 100 left", ctype, v)
		}

		never := reply{status: 400, ctype: ctype, header: map[string]string{"Retry-After": "1"},
			body: `{"errors":[{"message":"too expensive","extensions":{"code":"MAX_COST_EXCEEDED","cost":5000}}]}`}
		_, srv, clk, c := newFake([]reply{never, ok200}, 0)
		if r, waits := drive(t, clk, do(c, gqlRequest(t, queryDoc, "Repos")), 0); r.err != nil || r.resp.StatusCode != 400 || len(waits) > 0 || len(srv.sends()) != 1 {
			t.Errorf("%s, 400 MAX_COST_EXCEEDED: got %v, %v after %d sends and waits %v; want the 400, sent once", ctype, r.resp, r.err, len(srv.sends()), waits)
		}

		for _, status := range []int{400, 429} {
			later := reply{status: status, ctype: ctype, body: rateLimited}
			_, srv, clk, c := newFake([]reply{later, ok200}, 0)
			r, _ := drive(t, clk, do(c, gqlRequest(t, queryDoc, "Repos")), 10)
			sent := srv.sends()
			if r.err != nil || r.resp.StatusCode != 200 || len(sent) != 2 || sent[1].Sub(sent[0]) != 4*time.Second {
				t.Errorf("%s, %d RATE_LIMITED: got %v, %v after sends %v; want the retry's 200, 4s (retryAfterSeconds) after", ctype, status, r.resp, r.err, sent)
			}
		}
	}
}
