package serve

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/costguard/costguard/overload"
)

// watchReloads reloads the configuration file at path each time reload
// delivers (Main feeds it SIGHUP), one reload at a time, until ctx is
// done. Without a file there is nothing to re-read, and it says so.
func (s *server) watchReloads(ctx context.Context, reload <-chan os.Signal, path string) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-reload:
			if s.d.opts.Schema != nil {
				_ = s.reloadSchema(ctx) // logged
			}
			if path == "" {
				if s.d.opts.Schema == nil {
					s.log.WarnContext(ctx, s.prog+": reload asked, but there is no -config file to re-read; the built-in defaults stay")
				}
				continue
			}
			_ = s.reload(path) // logged
		}
	}
}

// reloadSchema builds the binary's schema again (Options.Schema: a file
// re-read, an upstream introspected again) and serves it from the next
// request on, once the running configuration's field limits and trusted
// documents hold on it. A schema that cannot be built or checked changes
// nothing. The outcome is logged, and returned for tests.
func (s *server) reloadSchema(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	next, err := s.d.opts.Schema(ctx, s.log)
	if err == nil {
		err = s.lim.CheckSchema(next.Schema())
	}
	if err != nil {
		s.log.Warn(s.prog+": schema reload refused; the running schema stays", "err", err)
		return err
	}
	s.schema = next
	s.gql.set(s.graphQL(s.cfg))
	s.log.Info(s.prog + ": schema reloaded")
	return nil
}

// reload re-reads the file at path and swaps in, atomically, the file's
// middleware.Policy (Limiter.Reload): plans, anonymous_plan, api_keys, mode
// and failure_mode, trusted_proxies, the graphql limits and costs, the
// REST costs and limits, the field limits, the lanes (with their queue and
// challenge), the concurrency caps (top-level and per plan), the
// subscription cap and the trusted documents. Requests in flight finish
// under the configuration they started with; none is dropped. The keys
// that shape what was built at start (keepRestartKeys: the
// middleware.Dependencies and the server's own) keep their running
// values, and a warning names those the file changed. A file that fails to load or that the middleware
// refuses changes nothing. The outcome is logged, and returned for tests.
func (s *server) reload(path string) error {
	s.mu.Lock()
	defer s.mu.Unlock()

	next, err := loadConfigOver(path, s.d.opts.defaults)
	if err == nil {
		var kept []string
		if err = s.checkDemo(next); err == nil {
			kept = next.keepRestartKeys(s.cfg)
			err = s.apply(next)
		}
		if err == nil {
			if len(kept) > 0 {
				s.log.Warn(s.prog+": reload: these keys take a restart to change; their running values stay",
					"file", path, "keys", strings.Join(kept, ", "))
			}
			s.log.Info(s.prog+": configuration reloaded", "file", path)
			return nil
		}
		err = refusedConfig{file: path, doc: next.doc, err: err}
	}
	// err names the file and the key path, and the line of a mistake of shape.
	s.log.Warn(s.prog+": reload refused; the running configuration stays", "file", path, "err", err)
	return err
}

// apply swaps next in: the limiter's settings, and the gqlgen server when
// graphql.max_tokens changed, since its parser's token limit is fixed
// when it is built. The order keeps the parser's limit at or above the
// Extension's at every moment: a raised limit reaches the parser first, a
// lowered one the Extension first.
func (s *server) apply(next config) error {
	if s.challenger == nil {
		for i, l := range next.Lanes {
			if l.Challenge != "" {
				return fmt.Errorf("lanes[%d].challenge is %q, but the server started with no lane asking for a challenge, so it has no challenger: restart to add one", i, l.Challenge)
			}
		}
	}
	before, after := s.cfg.GraphQL.maxTokens(), next.GraphQL.maxTokens()
	old := s.gql.get()
	if after > before {
		s.gql.set(s.graphQL(next))
	}
	_, policy := next.limiterConfig()
	if err := s.lim.Reload(policy); err != nil {
		s.gql.set(old)
		return err
	}
	if after < before {
		s.gql.set(s.graphQL(next))
	}
	s.cfg = next
	return nil
}

// keepRestartKeys sets back to running's values the keys a running server
// cannot change, because they size what was built at start (the body
// bounds, the memory store, gqlgen's query cache, the over-limit cache and
// split-budget layers, the shedder with its degradation list, the
// challenge's secret and work, the resolvers' demo latency) or are fixed in
// the Limiter (the Retry-After jitter, the store's timeout and breaker), and names
// those c had changed: middleware.Dependencies, which Limiter.Reload does
// not take, and the server's own.
func (c *config) keepRestartKeys(running config) (changed []string) {
	keep(&changed, "max_body_bytes", &c.MaxBodyBytes, running.MaxBodyBytes)
	keep(&changed, "max_body_bytes_in_flight", &c.MaxBodyBytesInFlight, running.MaxBodyBytesInFlight)
	keep(&changed, "max_upload_bytes", &c.MaxUploadBytes, running.MaxUploadBytes)
	keep(&changed, "memory_store.max_keys", &c.MemoryStore.MaxKeys, running.MemoryStore.MaxKeys)
	keep(&changed, "graphql.query_cache_entries", &c.GraphQL.QueryCacheEntries, running.GraphQL.QueryCacheEntries)
	keep(&changed, "graphql.query_cache_bytes", &c.GraphQL.QueryCacheBytes, running.GraphQL.QueryCacheBytes)
	keep(&changed, "over_limit_cache", &c.OverLimitCache, running.OverLimitCache)
	keep(&changed, "split_budget.lease_fraction", &c.SplitBudget.LeaseFraction, running.SplitBudget.LeaseFraction)
	keep(&changed, "split_budget.settle_interval", &c.SplitBudget.SettleInterval, running.SplitBudget.SettleInterval)
	keep(&changed, "retry_after_jitter", &c.RetryAfterJitter, running.RetryAfterJitter)
	keep(&changed, "store_timeout", &c.StoreTimeout, running.StoreTimeout)
	keep(&changed, "breaker.failures", &c.Breaker.Failures, running.Breaker.Failures)
	keep(&changed, "breaker.cool_down", &c.Breaker.CoolDown, running.Breaker.CoolDown)
	keep(&changed, "overload.max_in_flight", &c.Overload.MaxInFlight, running.Overload.MaxInFlight)
	keepFunc(&changed, "overload.shed_at", &c.Overload.ShedAt, running.Overload.ShedAt, sameShedAt)
	keep(&changed, "overload.adaptive", &c.Overload.Adaptive, running.Overload.Adaptive)
	keep(&changed, "overload.max_queue", &c.Overload.MaxQueue, running.Overload.MaxQueue)
	keepFunc(&changed, "degradation", &c.Degradation, running.Degradation, slices.Equal)
	keep(&changed, "challenge.secret", &c.Challenge.Secret, running.Challenge.Secret)
	keep(&changed, "challenge.bits", &c.Challenge.Bits, running.Challenge.Bits)
	keep(&changed, "demo_latency", &c.DemoLatency, running.DemoLatency)
	keep(&changed, "admin.token_sha256", &c.Admin.TokenSHA256, running.Admin.TokenSHA256)
	return changed
}

// sameShedAt reports whether a and b shed alike: a priority either leaves
// out has its default.
func sameShedAt(a, b map[overload.Priority]float64) bool {
	withDefaults := func(m map[overload.Priority]float64) map[overload.Priority]float64 {
		d := overload.DefaultShedAt()
		maps.Copy(d, m)
		return d
	}
	return maps.Equal(withDefaults(a), withDefaults(b))
}

// keepFunc is keep for values == cannot compare.
func keepFunc[T any](changed *[]string, key string, next *T, running T, equal func(T, T) bool) {
	if !equal(*next, running) {
		*changed = append(*changed, key)
		*next = running
	}
}

// keep sets *next to running, noting key when they differed.
func keep[T comparable](changed *[]string, key string, next *T, running T) {
	if *next != running {
		*changed = append(*changed, key)
		*next = running
	}
}

// swappable serves through the handler set last. A request loads it once.
type swappable struct{ h atomic.Pointer[http.Handler] }

func (s *swappable) set(h http.Handler) { s.h.Store(&h) }
func (s *swappable) get() http.Handler  { return *s.h.Load() }

func (s *swappable) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.get().ServeHTTP(w, r) }
