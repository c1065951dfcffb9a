package main

// The diy column of the overhead group: what a gqlgen user writes by hand
// instead of a limiter (https://github.com/99designs/gqlgen/issues/972,
// where the maintainer points to a rate limiter beside the built-in
// complexity limit): gqlgen with
// extension.FixedComplexityLimit, a golang.org/x/time/rate limiter per
// client address in a bounded LRU map, and the three X-RateLimit-* headers
// written on every response.

import (
	"math"
	"net"
	"net/http"
	"strconv"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"golang.org/x/time/rate"
)

// The diy stack's limits: generous, so that nothing is refused and every
// request does the full work (lookup, Allow, headers).
const (
	diyRate  = 1_000_000_000 // requests per second
	diyBurst = 1_000_000_000
	// diyClients is the most client limiters kept: the least recently
	// used one is dropped beyond it, so a flood of addresses cannot grow
	// the map without bound.
	diyClients = 10_000
)

// diyLimiter is the hand-made per-client rate limit: one x/time/rate
// Limiter per client address.
type diyLimiter struct {
	clients *lru.Cache[string, *rate.Limiter] // safe for concurrent use
	limit   rate.Limit
	burst   int
	next    http.Handler
}

// newDIY puts a per-client rate limit of clients limiters at most in front
// of next.
func newDIY(next http.Handler, clients int) (*diyLimiter, error) {
	c, err := lru.New[string, *rate.Limiter](clients)
	if err != nil {
		return nil, err
	}
	return &diyLimiter{clients: c, limit: diyRate, burst: diyBurst, next: next}, nil
}

// limiter is the client's limiter, created on its first request.
func (d *diyLimiter) limiter(client string) *rate.Limiter {
	if l, ok := d.clients.Get(client); ok {
		return l
	}
	l := rate.NewLimiter(d.limit, d.burst)
	// Another request of the same client may have added one meanwhile:
	// keep that one.
	if prev, ok, _ := d.clients.PeekOrAdd(client, l); ok {
		return prev
	}
	return l
}

func (d *diyLimiter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	client, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		client = r.RemoteAddr
	}
	l := d.limiter(client)
	now := time.Now()
	allowed := l.AllowN(now, 1)
	tokens := l.TokensAt(now)
	h := w.Header()
	h.Set("X-RateLimit-Limit", strconv.Itoa(d.burst))
	h.Set("X-RateLimit-Remaining", strconv.Itoa(max(int(tokens), 0)))
	// The Unix time at which the bucket is full again, rounded up.
	full := time.Duration(math.Ceil((float64(d.burst) - tokens) / float64(d.limit) * float64(time.Second)))
	h.Set("X-RateLimit-Reset", strconv.FormatInt(now.Add(full).Add(time.Second-1).Unix(), 10))
	if !allowed {
		http.Error(w, "rate limit exceeded", http.StatusTooManyRequests)
		return
	}
	d.next.ServeHTTP(w, r)
}
