package serve

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/costguard/costguard/limiter"
)

// readyReuse is how long one ping's answer serves /readyz: the probes are
// not metered, so without it a flood of them would become a flood of
// pings to Redis (to every master of a Cluster).
const readyReuse = time.Second

// healthz answers GET /healthz: 200 while the process serves HTTP. It
// checks nothing else, so that a slow store never gets a live process
// restarted.
func healthz(w http.ResponseWriter, _ *http.Request) {
	writeText(w, http.StatusOK, "ok")
}

// readiness answers GET /readyz: 200 when the budget store answers a ping
// within the store timeout, 503 otherwise. One ping runs at a time; the
// probes that arrive meanwhile wait for it, and its answer serves every
// probe for readyReuse (by the injected clock).
type readiness struct {
	ping    func(context.Context) error // nil: always ready (the in-memory store)
	timeout time.Duration               // the store timeout, the limiter's bound on every store call
	clock   limiter.Clock
	log     *slog.Logger
	prog    string // opens the log lines

	// turn is held by the probe that pings, and guards the fields below.
	turn    chan struct{}
	checked bool // a ping has answered
	at      time.Time
	err     error
}

func newReadiness(ping func(context.Context) error, timeout time.Duration, clock limiter.Clock, log *slog.Logger, prog string) *readiness {
	return &readiness{ping: ping, timeout: timeout, clock: clock, log: log, prog: prog, turn: make(chan struct{}, 1)}
}

// check reports whether the store answers: the last ping's answer if it
// is recent enough, else a new ping's. It returns early, with ctx's error,
// only when ctx ends while another probe pings.
func (r *readiness) check(ctx context.Context) error {
	if r.ping == nil {
		return nil
	}
	select {
	case r.turn <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-r.turn }()

	now := r.clock.Now()
	if r.checked {
		if age := now.Sub(r.at); age >= 0 && age < readyReuse {
			return r.err
		}
	}
	// The answer is the store's, not this probe's: a client hanging up
	// must not be remembered as the store failing.
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.timeout)
	err := r.ping(pctx)
	cancel()
	switch {
	case err != nil && (!r.checked || r.err == nil):
		r.log.WarnContext(ctx, r.prog+": the budget store does not answer; /readyz answers 503", "err", err)
	case err == nil && r.checked && r.err != nil:
		r.log.InfoContext(ctx, r.prog+": the budget store answers again; /readyz answers 200")
	}
	r.checked, r.at, r.err = true, now, err
	return err
}

// ServeHTTP answers GET /readyz. The reason for a 503 is for the operator's
// log, not the client: the body only says which dependency is missing.
func (r *readiness) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if err := r.check(req.Context()); err != nil {
		writeText(w, http.StatusServiceUnavailable, "budget store unavailable")
		return
	}
	writeText(w, http.StatusOK, "ok")
}

// writeText answers a probe: one line of plain text, never cached.
func writeText(w http.ResponseWriter, status int, line string) {
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(line + "\n"))
}
