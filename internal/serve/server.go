package serve

import (
	"context"
	cryptorand "crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/handler"
	"github.com/99designs/gqlgen/graphql/handler/extension"
	"github.com/99designs/gqlgen/graphql/handler/transport"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"go.yaml.in/yaml/v3"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/challenge"
	"github.com/costguard/costguard/complexity"
	"github.com/costguard/costguard/graph"
	"github.com/costguard/costguard/identity"
	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/limiter/stack"
	"github.com/costguard/costguard/listsizes/redislistsizes"
	"github.com/costguard/costguard/middleware"
	adminapi "github.com/costguard/costguard/middleware/admin"
	"github.com/costguard/costguard/middleware/prommetrics"
	"github.com/costguard/costguard/middleware/querycache"
	"github.com/costguard/costguard/opcosts"
	"github.com/costguard/costguard/override"
	"github.com/costguard/costguard/spenders"
	"github.com/costguard/costguard/spenders/redisspenders"
	"github.com/costguard/costguard/timeline"
)

// deps are what a caller may inject into newServer; zero fields take the
// production defaults.
type deps struct {
	// store holds the budgets; nil: an in-memory store owned by the server.
	store limiter.Store
	// ping asks store whether it answers, for /readyz; nil: always ready,
	// as the in-memory store is.
	ping func(ctx context.Context) error
	// clock is the time source of the limiter and of /readyz's reuse of a
	// ping's answer; nil: the system clock.
	clock limiter.Clock
	// logger receives store-failure warnings; nil: slog.Default().
	logger *slog.Logger
	// resolver serves the data; nil: a freshly seeded graph.Resolver.
	resolver *graph.Resolver
	// schema, when set, is served instead of resolver's: what
	// opts.Schema built. It needs opts.NoDemo.
	schema graphql.ExecutableSchema
	// opts are the binary's Options; the zero value: the example server's.
	opts Options
	// queueTimer times a queued critical request's wait (lanes[].queue);
	// nil: time.NewTimer. Tests inject one that never fires, so a request
	// that answers while every slot is held was never queued.
	queueTimer limiter.Timer
	// keys resolves the API keys the configuration file does not have
	// (-keys-postgres); nil: the file's only.
	keys identity.KeyLookup
	// keyMetrics, when set, exports what the cache in front of keys did
	// (prommetrics.KeyCache); served at /metrics with the rest.
	keyMetrics prometheus.Collector
	// overrides keeps the per-principal overrides; nil: in this process's
	// memory. The server shares them through Redis when its budgets are
	// there.
	overrides override.Store
	// spendersShared, when set, is the Redis the top spenders of every
	// process meet in (published every 5 s, merged by /admin/top), and
	// the list sizes they record (added every 10 s, summed by
	// /admin/list-sizes); nil: this process's alone.
	spendersShared redis.UniversalClient
	// adminTokenSHA256 is the hex SHA-256 of the admin API's bearer token;
	// "": the API asks for none (Run allows that only on a loopback-only
	// admin listener).
	adminTokenSHA256 string
	// storeTimeout bounds each store call over the file's store_timeout;
	// 0: the file's (or the library's default). Tests
	// of exactness on a loaded machine raise it, so that a slow refund is
	// not counted as a store failure.
	storeTimeout time.Duration
}

// server is the API, an http.Handler, and what a reload swaps in
// it (reload.go).
type server struct {
	http.Handler // the public routes
	// admin serves the operational endpoints (/metrics, /healthz,
	// /readyz) on the admin listener, off the public port.
	admin http.Handler

	lim     *middleware.Limiter
	metrics *prommetrics.Metrics // every decision, served at /metrics
	spend   *spenders.Tracker    // the top spenders, served at /admin/top
	recent  *timeline.Timeline   // each principal's recent decisions, at /admin/principals/…
	ops     *opcosts.Tracker     // each GraphQL operation's costs, at /admin/operations
	stats   *adminapi.Stats      // the decisions' counters, at /admin/stats and on the dashboard
	reg     *prometheus.Registry // this server's metrics, Go's and the process's
	d       deps                 // the store, clock and logger every limiter configuration gets
	log     *slog.Logger
	prog    string                   // opens the log lines: the program's name
	schema  graphql.ExecutableSchema // served on /graphql
	res     *graph.Resolver          // the demo schema's data; nil when schema is another
	// challenger is the PoW of lanes with challenge: pow; nil when no lane
	// asked for one at start.
	challenger *challenge.PoW
	cache      *querycache.Cache // shared by every gqlgen server built
	// persisted is what clients register through automatic persisted
	// queries, bounded by entries and bytes, shared by every gqlgen
	// server built; the trusted documents answer before it.
	persisted *querycache.Persisted
	gql       swappable // the gqlgen server behind the limiter, rebuilt when graphql.max_tokens changes

	mu  sync.Mutex // one reload at a time; guards cfg
	cfg config     // the configuration in force

	// sizes records the lists priced at an assumed size, at
	// /admin/list-sizes; it outlives reloads, which may change list_sizes.
	sizes *complexity.ListSizeRecorder
}

// newServer builds the API: GraphQL on /graphql (GET and POST) and, with
// the demo parts, the GraphiQL page on / and the REST demo routes under
// /api/, all drawing on one per-principal budget, and the probes /healthz
// and /readyz, which draw on none. cleanup releases what the server owns
// (not d.store); call it after the HTTP server has shut down.
func newServer(cfg config, d deps) (s *server, cleanup func() error, err error) {
	s = &server{d: d, log: d.logger, prog: d.opts.program(), schema: d.schema, res: d.resolver, cfg: cfg}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.schema != nil && !d.opts.NoDemo {
		return nil, nil, errors.New("a schema of its own needs the demo parts left out: they serve the demo schema's data")
	}
	if err := s.checkDemo(cfg); err != nil {
		return nil, nil, refusedConfig{file: cfg.file, doc: cfg.doc, err: err}
	}
	if s.schema == nil {
		if s.res == nil {
			s.res = graph.NewResolver(graph.WithLatency(cfg.DemoLatency))
		}
		s.schema = s.res.Schema()
	}
	if cfg.needsChallenger() {
		if s.challenger, err = newChallenger(cfg.Challenge, s.log, s.prog); err != nil {
			return nil, nil, err
		}
	}
	if err := s.newObservers(); err != nil {
		return nil, nil, err
	}
	mdeps, policy := s.limiterConfig(cfg)
	if s.lim, err = middleware.New(mdeps, policy); err != nil {
		return nil, nil, refusedConfig{file: cfg.file, doc: cfg.doc, err: err}
	}
	// The shedder's count, its high-water mark (which sampling the count
	// between two scrapes would miss), capacity and lanes.
	s.reg.MustRegister(prommetrics.Load(s.lim.Load))
	if err := s.buildGraphQL(cfg); err != nil {
		s.lim.Close()
		return nil, nil, err
	}

	// The probes and /metrics are outside the limiter: never identified,
	// priced or debited, so an exhausted budget never fails a health check
	// or hides the metrics.
	timeout := mdeps.StoreTimeout
	if timeout == 0 {
		timeout = stack.DefaultStoreTimeout
	}
	clock := d.clock
	if clock == nil {
		clock = limiter.SystemClock{}
	}
	readiness := newReadiness(d.ping, timeout, clock, s.log, s.prog)
	shared, sharedSizes, err := s.buildAdmin(readiness, clock)
	if err != nil {
		s.lim.Close()
		return nil, nil, err
	}
	s.Handler = s.publicRoutes(readiness)
	stopPublishing := func() {}
	if shared != nil {
		stopPublishing = s.publish(shared, sharedSizes, clock)
	}
	closeLimiter := s.watchDataLoss()
	return s, func() error { stopPublishing(); return closeLimiter() }, nil
}

// checkDemo refuses, without the demo parts, a configuration that sets
// demo_latency: nothing would honour it.
func (s *server) checkDemo(cfg config) error {
	if s.d.opts.NoDemo && cfg.DemoLatency != 0 {
		return &budget.ConfigError{Path: []string{"demo_latency"}, Err: errors.New("this server has no demo resolvers to slow: remove the key")}
	}
	return nil
}

// newObservers builds what counts the decisions (s.observe) and the
// registry /metrics serves.
func (s *server) newObservers() (err error) {
	// A registry of its own, not Prometheus's default: a process (or a
	// test) may build several servers.
	s.reg = prometheus.NewRegistry()
	s.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if s.d.keyMetrics != nil {
		s.reg.MustRegister(s.d.keyMetrics)
	}
	if s.metrics, err = prommetrics.New(prommetrics.WithRegisterer(s.reg)); err != nil {
		return err
	}
	if s.spend, err = spenders.New(spenders.Config{}); err != nil {
		return err
	}
	if s.recent, err = timeline.New(timeline.Config{}); err != nil {
		return err
	}
	if s.ops, err = opcosts.New(opcosts.Config{}); err != nil {
		return err
	}
	// The 20 costliest operation names, a bounded label.
	opMetrics, err := prommetrics.Operations(s.ops, 20)
	if err != nil {
		return err
	}
	s.reg.MustRegister(opMetrics)
	since := time.Now()
	if s.d.clock != nil {
		since = s.d.clock.Now()
	}
	s.stats = adminapi.NewStats(since, func() (middleware.Load, bool) { return s.lim.Load() })
	s.sizes = complexity.NewListSizeRecorder()
	return nil
}

// buildGraphQL checks the schema against cfg and builds the GraphQL
// handler, with the caches every later rebuild shares.
func (s *server) buildGraphQL(cfg config) (err error) {
	if s.cache, err = querycache.New(cfg.GraphQL.QueryCacheEntries, cfg.GraphQL.QueryCacheBytes); err != nil {
		return refusedConfig{file: cfg.file, doc: cfg.doc, err: err}
	}
	if s.persisted, err = querycache.NewPersisted(0, 0); err != nil {
		return err
	}
	if err := s.lim.CheckSchema(s.schema.Schema()); err != nil { // field limits and trusted documents name fields of the schema
		return refusedConfig{file: cfg.file, doc: cfg.doc, err: err}
	}
	s.gql.set(s.graphQL(cfg))
	return nil
}

// buildAdmin builds the admin listener's handler into s.admin: the
// probes, /metrics and package admin's routes. With Redis, every
// process's top spenders and list sizes meet there, in shared and
// sharedSizes (nil without Redis), which s.publish publishes to, and
// /admin/top and /admin/list-sizes answer for all.
func (s *server) buildAdmin(readiness *readiness, clock limiter.Clock) (shared *redisspenders.Shared, sharedSizes *redislistsizes.Shared, err error) {
	admin := http.NewServeMux()
	admin.HandleFunc("GET /healthz", healthz)
	admin.Handle("GET /readyz", readiness)
	admin.Handle("GET /metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelWarn)}))
	adminCfg := adminapi.Config{
		TokenSHA256: s.d.adminTokenSHA256, NoToken: s.d.adminTokenSHA256 == "", Logger: s.log, Spenders: s.spend, Timeline: s.recent, Operations: s.ops, Stats: s.stats, Clock: clock,
		ListSizes: s.sizes,
	}
	if s.d.spendersShared != nil {
		if shared, err = redisspenders.New(redisspenders.Config{Client: s.d.spendersShared, Tracker: s.spend}); err != nil {
			return nil, nil, err
		}
		if sharedSizes, err = redislistsizes.New(redislistsizes.Config{Client: s.d.spendersShared, Recorder: s.sizes}); err != nil {
			return nil, nil, err
		}
		adminCfg.SharedSpenders, adminCfg.SharedListSizes = shared, sharedSizes
	}
	principals, err := adminapi.New(s.lim, adminCfg)
	if err != nil {
		return nil, nil, err
	}
	admin.Handle("/admin/", principals)
	s.admin = admin
	if s.d.adminTokenSHA256 == "" {
		// Without a token the whole listener, metrics and probes too,
		// answers only requests for 127.0.0.1, [::1] or localhost from no
		// page or a page of its own: no web page can read it by rebinding
		// its name to 127.0.0.1.
		s.admin = adminapi.LocalOnly(admin)
	}
	return shared, sharedSizes, nil
}

// publish publishes this process's top spenders and list sizes to Redis,
// in two goroutines, until stop is called.
func (s *server) publish(shared *redisspenders.Shared, sharedSizes *redislistsizes.Shared, clock limiter.Clock) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{}, 2)
	go func() {
		defer func() { done <- struct{}{} }()
		shared.Run(ctx, clock.Now, func(err error) { s.log.Warn(s.prog+": publishing the top spenders", "err", err) })
	}()
	go func() {
		defer func() { done <- struct{}{} }()
		sharedSizes.Run(ctx, func(err error) { s.log.Warn(s.prog+": publishing the list sizes", "err", err) })
	}()
	return func() { cancel(); <-done; <-done }
}

// publicRoutes is the public port's handler. It keeps the cheap probes
// (load balancers look there) but not /metrics: a scrape costs
// milliseconds of CPU, unmetered.
func (s *server) publicRoutes(readiness *readiness) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", healthz)
	mux.Handle("GET /readyz", readiness)
	var gql http.Handler = &s.gql
	if s.d.opts.WrapGraphQL != nil {
		gql = s.d.opts.WrapGraphQL(gql, s.lim)
	}
	mux.Handle("/graphql", streamsOutliveWriteTimeout(gql))
	if !s.d.opts.NoDemo {
		s.mountDemo(mux)
	}
	return mux
}

// watchDataLoss counts, in costguard_store_data_loss_total, each time a
// store that detects data loss (redisstore) reports that Redis lost what
// it held, and logs it; on the same report the limiter drops what it
// derived from the lost data (package stack). It returns the server's cleanup:
// stop listening, then close the limiter. With any other store the
// counter is not served.
func (s *server) watchDataLoss() (cleanup func() error) {
	n, ok := s.d.store.(stack.DataLossNotifier)
	if !ok {
		return s.lim.Close
	}
	lost := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "costguard_store_data_loss_total",
		Help: "Times the store found that Redis lost its data (a restart, a failover to a replica, a flush).",
	})
	s.reg.MustRegister(lost)
	stop := n.OnDataLoss(func() {
		lost.Inc()
		s.log.Warn("store: Redis lost its data (restarted, failed over or flushed): remembered refusals and leases dropped; budgets start whole")
	})
	return func() error { stop(); return s.lim.Close() }
}

// observe counts a decision in the metrics, by its net points (what stays
// debited once refunds and excess are settled) among the spenders, in its
// principal's timeline, in the dashboard's counters and, for a GraphQL
// operation, in its operation's costs.
func (s *server) observe(e *middleware.Event) {
	s.metrics.ObserveDecision(e)
	s.stats.Add(e)
	s.spend.Add(e.Time, e.Plan, e.Key, e.Net())
	own := e.PrincipalPlan
	if own == e.Plan {
		own = "" // no override: Plan says it
	}
	s.recent.Add(e.Key, timeline.Entry{
		Time: e.Time, Kind: string(e.Kind), Operation: e.Operation, Plan: e.Plan, PrincipalPlan: own,
		Requested: e.RequestedCost, Actual: e.ActualCost, HasActual: e.HasActualCost,
		Charged: e.Charged, Refunded: e.Refunded, Excess: e.Excess, Net: e.Net(), Outcome: string(e.Outcome), Code: e.Code,
	})
	if e.Kind == middleware.KindGraphQL {
		s.ops.Add(e.Time, opcosts.Decision{
			Operation: e.Operation, Requested: e.RequestedCost, Actual: e.ActualCost, HasActual: e.HasActualCost,
			Refused: e.Outcome != budget.ClassAdmitted && e.Outcome != budget.ClassShadowRejected,
		})
	}
}

// limiterConfig is cfg's middleware configuration with the injected
// store, clock, logger, observer, key lookup and challenger.
func (s *server) limiterConfig(cfg config) (middleware.Dependencies, middleware.Policy) {
	deps, policy := cfg.limiterConfig()
	deps.Store, deps.Clock, deps.Logger = s.d.store, s.d.clock, s.d.logger
	if s.d.storeTimeout != 0 {
		deps.StoreTimeout = s.d.storeTimeout // a test's, over the file's
	}
	deps.Overrides.Store = s.d.overrides
	deps.Observer = middleware.ObserverFunc(s.observe)
	deps.ListSizeRecorder = s.sizes
	deps.KeyLookup = s.d.keys // after the file's api_keys
	if s.d.queueTimer != nil && deps.Overload != nil {
		oc := *deps.Overload
		oc.Timer = s.d.queueTimer
		deps.Overload = &oc
	}
	if s.challenger != nil {
		deps.Challenger = s.challenger
	}
	return deps, policy
}

// newChallenger builds the PoW of cfg. Without a configured secret it
// draws 32 random bytes, and says once that tokens then verify only in
// this process. The secret itself is never logged.
func newChallenger(cfg challengeConfig, log *slog.Logger, prog string) (*challenge.PoW, error) {
	key := []byte(cfg.Secret)
	if len(key) == 0 {
		key = make([]byte, challenge.MinSecretLen)
		if _, err := cryptorand.Read(key); err != nil {
			return nil, fmt.Errorf("challenge secret: %w", err)
		}
		log.Info(prog + ": challenge.secret is unset, so a random one was drawn: challenge tokens verify only in this process; " +
			"give every process the same challenge.secret to share them")
	}
	pow, err := challenge.NewPoW(challenge.Config{Secret: key, Bits: cfg.Bits})
	if err != nil {
		// config.validate checked both keys; this is the backstop.
		return nil, fmt.Errorf("%w: challenge: %w", errConfig, err)
	}
	return pow, nil
}

// graphQL builds the gqlgen server for cfg behind the limiter: the
// Extension is added and the wrapper sets the statuses and headers. It
// is rebuilt when a reload changes graphql.max_tokens.
func (s *server) graphQL(cfg config) http.Handler {
	gql := handler.New(s.schema)
	// Both WebSocket subprotocols (graphql-transport-ws and the legacy
	// graphql-ws) and SSE carry subscriptions; each operation and each
	// event on them is priced and debited like a POST.
	gql.AddTransport(transport.Websocket{
		InitFunc:              s.lim.WebsocketInit(nil), // an unknown key in connection_init closes with 4403
		KeepAlivePingInterval: 10 * time.Second,
		InitTimeout:           10 * time.Second,
	})
	gql.AddTransport(transport.SSE{})
	gql.AddTransport(transport.GET{})
	if s.d.opts.POST != nil {
		gql.AddTransport(s.d.opts.POST)
	} else {
		gql.AddTransport(transport.POST{})
	}
	gql.AddTransport(transport.MultipartForm{}) // attachFile's uploads: streamed, bounded by max_upload_bytes
	gql.SetQueryCache(s.cache)                  // bounded by bytes too: documents can be a megabyte each
	// The Extension refuses longer documents before gqlgen parses them; the
	// parser's own limit is the same bound, should a transport skip it.
	gql.SetParserTokenLimit(cfg.GraphQL.maxTokens())
	gql.Use(extension.Introspection{}) // the GraphiQL page needs it
	// Automatic persisted queries: a client may send a document's hash
	// alone once the document is registered. The trusted documents answer
	// first; what clients register is kept in a cache bounded by entries
	// and bytes (querycache.NewPersisted's defaults), so a flood of
	// distinct registrations evicts rather than grows. Each registration
	// is a whole request, screened, priced and paid for.
	gql.Use(extension.AutomaticPersistedQuery{Cache: s.lim.PersistedQueryCache(s.persisted)})
	return s.lim.Handler(gql)
}

// streamsOutliveWriteTimeout lifts the server's WriteTimeout for an SSE
// subscription, whose response lasts as long as the subscription: every
// other response keeps it. (A WebSocket needs nothing: net/http clears a
// hijacked connection's deadlines.)
func streamsOutliveWriteTimeout(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.Header.Get("Accept"), "text/event-stream") {
			_ = http.NewResponseController(w).SetWriteDeadline(time.Time{})
		}
		h.ServeHTTP(w, r)
	})
}

// refusedConfig is a configuration the middleware refused. It reads
// "invalid configuration: FILE: line N: KEY: what is wrong", without the
// library's own "middleware: invalid config:" prefix, and wraps both
// errConfig and the middleware's error. The key path and its line are
// those of the budget.ConfigError in err, when there is one; the line is
// found in doc, the file's YAML.
type refusedConfig struct {
	file string     // "" when the configuration came from no file
	doc  *yaml.Node // the file's document; nil without one
	err  error
}

func (e refusedConfig) Error() string {
	msg := e.err.Error()
	for _, prefix := range []error{middleware.ErrInvalidConfig, budget.ErrInvalidConfig} {
		msg = strings.TrimPrefix(msg, prefix.Error()+": ")
	}
	if ce := (*budget.ConfigError)(nil); errors.As(e.err, &ce) && len(ce.Path) > 0 {
		key, line := locate(e.doc, ce.Path)
		msg = key + ": " + msg
		if line > 0 {
			msg = fmt.Sprintf("line %d: %s", line, msg)
		}
	}
	if e.file != "" {
		msg = e.file + ": " + msg
	}
	return errConfig.Error() + ": " + msg
}

func (e refusedConfig) Unwrap() []error { return []error{errConfig, e.err} }
