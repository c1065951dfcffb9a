package client

import (
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeClock is a clock that moves only when a test advances it. Every
// wait is announced on sleeping, so that a test knows when the Transport
// waits without sleeping itself.
type fakeClock struct {
	mu       sync.Mutex
	now      time.Time
	timers   []fakeTimer
	sleeping chan time.Duration
}

type fakeTimer struct {
	at time.Time
	c  chan time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Unix(1_800_000_000, 0), sleeping: make(chan time.Duration, 16)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) After(d time.Duration) (<-chan time.Time, func()) {
	c.mu.Lock()
	ch := make(chan time.Time, 1)
	c.timers = append(c.timers, fakeTimer{at: c.now.Add(d), c: ch})
	c.mu.Unlock()
	c.sleeping <- d
	return ch, func() {}
}

// advance moves the clock by d and fires the timers due.
func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	kept := c.timers[:0]
	for _, t := range c.timers {
		if t.at.After(c.now) {
			kept = append(kept, t)
			continue
		}
		t.c <- c.now
	}
	c.timers = kept
}

// reply is one scripted response of a fakeServer.
type reply struct {
	status int
	header map[string]string
	body   string
	size   int // a body of this many bytes instead, valid JSON
	ctype  string
}

// fakeServer is a Base that answers from a script (the last reply
// repeats) and records when each request was sent.
type fakeServer struct {
	clock   *fakeClock
	mu      sync.Mutex
	script  []reply
	sent    []time.Time
	bodies  []string
	replies int
}

func (s *fakeServer) RoundTrip(req *http.Request) (*http.Response, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sent = append(s.sent, s.clock.Now())
	var body string
	if req.Body != nil {
		b, _ := io.ReadAll(req.Body)
		req.Body.Close()
		body = string(b)
	}
	s.bodies = append(s.bodies, body)
	a := s.script[min(s.replies, len(s.script)-1)]
	s.replies++
	h := http.Header{"Content-Type": {"application/graphql-response+json"}}
	if a.ctype != "" {
		h.Set("Content-Type", a.ctype)
	}
	for k, v := range a.header {
		h.Set(k, v)
	}
	text := a.body
	if a.size > 0 {
		text = `{"data":{"blob":"` + strings.Repeat("x", a.size-len(`{"data":{"blob":""}}`)) + `"}}`
	}
	return &http.Response{
		StatusCode:    a.status,
		Header:        h,
		Body:          io.NopCloser(strings.NewReader(text)),
		ContentLength: int64(len(text)),
		Request:       req,
	}, nil
}

// sends returns when each request was sent.
func (s *fakeServer) sends() []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Time(nil), s.sent...)
}

// result is what one request came back with.
type result struct {
	resp *http.Response
	body string
	err  error
}

// do sends req through c in a goroutine; its result arrives on the
// channel returned.
func do(c *http.Client, req *http.Request) <-chan result {
	out := make(chan result, 1)
	go func() {
		resp, err := c.Do(req)
		r := result{resp: resp, err: err}
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			r.body = string(b)
		}
		out <- r
	}()
	return out
}

// drive advances clk by each wait the request announces, until its
// result arrives, and returns it with the waits; it fails after limit
// waits.
func drive(t *testing.T, clk *fakeClock, done <-chan result, limit int) (result, []time.Duration) {
	t.Helper()
	var waits []time.Duration
	for {
		select {
		case r := <-done:
			return r, waits
		case d := <-clk.sleeping:
			if waits = append(waits, d); len(waits) > limit {
				t.Fatalf("still waiting after %d waits: %v", limit, waits)
			}
			clk.advance(d)
		}
	}
}

// newFake returns a Transport on a fake clock and server, with rnd as
// its random source, and an http.Client using it.
func newFake(script []reply, rnd float64) (*Transport, *fakeServer, *fakeClock, *http.Client) {
	clk := newFakeClock()
	srv := &fakeServer{clock: clk, script: script}
	tr := &Transport{Base: srv, clock: clk, rand: func() float64 { return rnd }}
	return tr, srv, clk, &http.Client{Transport: tr}
}

// gqlRequest is a GraphQL POST of doc, named name.
func gqlRequest(t *testing.T, doc, name string) *http.Request {
	t.Helper()
	body := `{"query":` + quote(doc) + `,"operationName":` + quote(name) + `}`
	req, err := http.NewRequest("POST", "http://api.test/graphql", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	return req
}

func quote(s string) string {
	return `"` + strings.NewReplacer(`"`, `\"`, "\n", `\n`).Replace(s) + `"`
}
