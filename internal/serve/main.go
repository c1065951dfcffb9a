// Command server is costguard's example API: the graph package's GitHub-like
// schema on GraphQL and three REST routes, every request priced and debited
// from its principal's token bucket.
//
//	go run ./examples/server                       # :8080, in-memory budgets
//	go run ./examples/server -redis localhost:6379  # or redis://[:password@]localhost:6379/0
//	go run ./examples/server -redis-cluster 10.0.0.1:7000,10.0.0.2:7000
//	go run ./examples/server -config costguard.yaml
//	go run ./examples/server -keys-postgres postgres://localhost/costguard
//
// Routes:
//
//	GET  /                     GraphiQL, to explore the schema
//	GET  /graphql, POST /graphql
//	GET  /api/users/{login}    costs 1 point (rest.default_cost)
//	GET  /api/search?q=        costs 10 points (rest.routes); 503 degraded under load
//	POST /api/login            costs 1 point; 5 attempts in any 15 minutes per client address (rest.route_limits)
//	GET  /healthz              200 while serving; unlimited
//	GET  /readyz               200 when the budget store answers a ping, else 503; unlimited
//
// and on the admin listener (-admin-addr, default 127.0.0.1:9091) the
// probes again, GET /metrics (Prometheus metrics, docs/operations.md;
// unlimited, and never on the public port, where a scrape would be
// unmetered work), and package admin's routes behind a bearer token
// (-admin-token-file or admin.token_sha256; a loopback-only listener may
// go without):
//
//	GET    /admin/principals/{principal}           plan, override and budgets
//	PUT    /admin/principals/{principal}/override  {"plan": "pro"} or limits, optionally "until"
//	DELETE /admin/principals/{principal}/override
//	GET    /admin/top, /admin/operations, /admin/stats, /admin/stats/history
//	GET    /admin/list-sizes                       the list sizes responses returned, the sizes to assume
//	GET    /admin/                                 a dashboard of those (the page needs no token)
//
// Requests with "Authorization: Bearer demo-free-key" (or X-API-Key) spend
// alice's budget on the free plan (5000 points an hour); requests without a
// key spend their IP address's budget on the anon plan (500 an hour).
// docs/server.md describes the flags and every configuration key.
//
// Under load, requests are shed by lane: anonymous ones first, with a
// proof-of-work challenge a client can solve to be admitted; checkout
// (createIssue) last. demo_latency slows the resolvers for a demo.
//
// SIGHUP re-reads the -config file and swaps plans, API keys, modes, route
// costs and GraphQL limits without dropping a request; docs/server.md's
// "Reloading" says what takes a restart instead.
//
// The process is a thin shell around run (flags, store, listener, reloads
// on SIGHUP, graceful shutdown on SIGINT or SIGTERM) and newServer (the
// handler), which the tests drive directly.
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/costguard/costguard/limiter/redisstore"
)

// HTTP server bounds: no client can hold a connection or a handler forever.
const (
	readHeaderTimeout = 5 * time.Second
	readTimeout       = 30 * time.Second
	writeTimeout      = 30 * time.Second
	idleTimeout       = 2 * time.Minute
	// defaultShutdownTimeout is how long a shutdown waits, by default, for
	// the requests in flight (-shutdown-timeout).
	defaultShutdownTimeout = 10 * time.Second
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// SIGHUP reloads the -config file. One pending signal is enough: those
	// that arrive during a reload ask for the same file again.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr, hup)
	signal.Stop(hup)
	stop()
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
	case errors.Is(err, errUsage), errors.Is(err, errConfig):
		fmt.Fprintln(os.Stderr, "server:", err)
		os.Exit(2)
	default:
		fmt.Fprintln(os.Stderr, "server:", err)
		os.Exit(1)
	}
}

// errUsage wraps errors in the command line.
var errUsage = errors.New("usage")

// run serves until ctx is done, then shuts down gracefully. It prints the
// address it listens on to stdout, and flag errors and logs to stderr. Each
// value reload delivers re-reads the -config file (main feeds it SIGHUP;
// nil: never). Its errors carry no "server:" prefix: main adds the one
// prefix.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, reload <-chan os.Signal) error {
	fs := flag.NewFlagSet("server", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", ":8080", "listen `address`")
	adminAddr := fs.String("admin-addr", defaultAdminAddr,
		"serve /metrics, /healthz, /readyz and the override API (/admin/…) at this `address`, off the public port (\"\": no admin listener)")
	redisAddr := fs.String("redis", "",
		"keep budgets in the Redis at this `address`: host:port, or a URL redis://[:password@]host:port/db (rediss:// for TLS)\n"+
			"(default $REDIS_URL, which takes the same forms; neither: in memory)")
	cluster := fs.String("redis-cluster", "",
		"keep budgets in the Redis Cluster reachable at these comma-separated `host:port`s")
	keysPostgres := fs.String("keys-postgres", "",
		"also look API keys up in the PostgreSQL database at this `URL` (postgres://user:password@host:port/db), through a cache; docs/keys.md")
	adminTokenFile := fs.String("admin-token-file", "",
		"read the admin API's bearer token from this `file` (instead of admin.token_sha256 in the configuration)")
	logLevel := fs.String("log-level", "info",
		"the least `level` logged: debug (adds a line per decision, naming the principal by a hash of its key), info, warn or error")
	cfgPath := fs.String("config", "", "YAML configuration `file` (docs/server.md); unset: built-in defaults")
	shutdownTimeout := fs.Duration("shutdown-timeout", defaultShutdownTimeout,
		"on SIGINT or SIGTERM, how long requests in flight may take to finish")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected arguments %q", errUsage, fs.Args())
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil || strings.ContainsAny(*logLevel, "+-0123456789") {
		return fmt.Errorf("%w: -log-level %q: write debug, info, warn or error", errUsage, *logLevel)
	}
	if *shutdownTimeout <= 0 {
		return fmt.Errorf("%w: -shutdown-timeout %v: it must be positive", errUsage, *shutdownTimeout)
	}

	cfg, err := loadConfig(*cfgPath)
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	adminToken, err := adminTokenSHA256(*adminTokenFile, cfg.Admin.TokenSHA256, *adminAddr)
	if err != nil {
		return err
	}
	// go-redis logs through a process-wide logger of its own: send its
	// pool messages to ours, at debug level, rather than to stderr.
	redisstore.SetGoRedisLogger(logger)

	// The shutdown runs the deferred calls below in reverse: after the HTTP
	// server has stopped (no request in flight), the limiter closes, which
	// returns split-budget leases and refunds through the store, and then
	// the store closes, which sends what its batcher holds and closes the
	// client.
	st, err := openStore(ctx, *redisAddr, *cluster)
	if err != nil {
		return err
	}
	defer st.close()

	keys, err := openKeys(ctx, *keysPostgres)
	if err != nil {
		return err
	}
	defer keys.close()
	if keys.lookup != nil {
		logger.Info("server: API keys from the configuration file, then from " + keys.describe)
	}

	h, cleanup, err := newServer(cfg, deps{store: st.store, ping: st.ping, logger: logger, keys: keys.lookup, keyMetrics: keys.metrics,
		overrides: st.overrides, spendersShared: st.shared, adminTokenSHA256: adminToken})
	if err != nil {
		return err
	}
	defer cleanup()

	// Reloads run in this goroutine, which ends before cleanup closes the
	// limiter it reloads.
	watchCtx, stopWatching := context.WithCancel(ctx)
	watching := make(chan struct{})
	go func() {
		defer close(watching)
		h.watchReloads(watchCtx, reload, *cfgPath)
	}()
	defer func() {
		stopWatching()
		<-watching
	}()

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err // "listen tcp …: bind: address already in use"
	}
	var adminLn net.Listener
	if *adminAddr != "" {
		if adminLn, err = net.Listen("tcp", *adminAddr); err != nil {
			ln.Close()
			return fmt.Errorf("admin listener: %w", err)
		}
	}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	fmt.Fprintf(stdout, "costguard example server on %s (budgets: %s)\n", displayURL(ln.Addr()), st.describe)

	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	if adminLn != nil {
		admin := &http.Server{
			Handler:           h.admin,
			ReadHeaderTimeout: readHeaderTimeout,
			ReadTimeout:       readTimeout,
			WriteTimeout:      writeTimeout,
			IdleTimeout:       idleTimeout,
			ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
		}
		fmt.Fprintf(stdout, "admin endpoints (/metrics, /healthz, /readyz) on %s\n", displayURL(adminLn.Addr()))
		fmt.Fprintf(stdout, "dashboard on %s/admin/\n", displayURL(adminLn.Addr()))
		if adminToken == "" {
			logger.Warn("server: the admin API (/admin/principals/…) is served WITHOUT a token: the admin listener is loopback-only, so only this machine reaches it, and it answers only requests for 127.0.0.1, [::1] or localhost from no web page or its own; give -admin-token-file or admin.token_sha256 to ask for one",
				"admin_addr", adminLn.Addr().String())
		} else {
			logger.Info("server: the admin API (/admin/principals/…) asks for a bearer token", "admin_addr", adminLn.Addr().String())
		}
		adminServed := make(chan error, 1)
		go func() { adminServed <- admin.Serve(adminLn) }()
		defer func() {
			_ = admin.Close() // scrapes and probes need no graceful end
			<-adminServed
		}()
	}
	// The pid to signal: under go run, the pid of go run itself is not the
	// server's, and signalling it would kill go run and orphan the server.
	pid := os.Getpid()
	fmt.Fprintf(stdout, "pid %d: kill -HUP %d re-reads -config, kill -TERM %d (or Ctrl-C) stops the server\n", pid, pid, pid)
	select {
	case err := <-served:
		return fmt.Errorf("serving: %w", err)
	case <-ctx.Done():
	}
	// Shutdown closes the listener at once (new connections are refused)
	// and waits for the requests in flight; past the deadline, Close cuts
	// the connections of those still running.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), *shutdownTimeout)
	defer cancel()
	err = srv.Shutdown(sctx)
	if err != nil {
		err = errors.Join(err, srv.Close())
	}
	<-served // http.ErrServerClosed
	if err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	return nil
}

// maxTokenFileBytes bounds what -admin-token-file reads.
const maxTokenFileBytes = 4096

// adminTokenSHA256 is the hex SHA-256 of the admin API's token: of the
// token in file (-admin-token-file, one line; trailing space and newlines
// are not part of it), else configured (admin.token_sha256), else "". It
// refuses the two at once, and no token when the admin listener at addr
// is reachable from other machines: the override API must not be open to
// the network.
func adminTokenSHA256(file, configured, addr string) (string, error) {
	if file != "" && configured != "" {
		return "", fmt.Errorf("%w: -admin-token-file and admin.token_sha256 exclude each other", errUsage)
	}
	hash := configured
	if file != "" {
		f, err := os.Open(file)
		if err != nil {
			return "", fmt.Errorf("%w: -admin-token-file: %w", errUsage, err)
		}
		b, err := io.ReadAll(io.LimitReader(f, maxTokenFileBytes+1))
		f.Close()
		token := strings.TrimRight(string(b), " \t\r\n")
		switch {
		case err != nil:
			return "", fmt.Errorf("%w: -admin-token-file: %w", errUsage, err)
		case len(b) > maxTokenFileBytes:
			return "", fmt.Errorf("%w: -admin-token-file %s is larger than %d bytes", errUsage, file, maxTokenFileBytes)
		case len(token) < minAdminToken || strings.ContainsAny(token, "\r\n"):
			return "", fmt.Errorf("%w: -admin-token-file %s: the token must be one line of at least %d bytes", errUsage, file, minAdminToken)
		}
		sum := sha256.Sum256([]byte(token))
		hash = hex.EncodeToString(sum[:])
	}
	if hash == "" && addr != "" && !loopbackOnly(addr) {
		return "", fmt.Errorf("%w: the admin listener %s is reachable from other machines and serves the override API (/admin/principals/…): give it a token (-admin-token-file, or admin.token_sha256 in the configuration), or listen on loopback (-admin-addr 127.0.0.1:9091)", errUsage, addr)
	}
	return hash, nil
}

// minAdminToken is the shortest admin token accepted: 16 bytes, so that a
// token cannot be guessed; 32 random bytes in hex is a good choice.
const minAdminToken = 16

// loopbackOnly reports whether a listener on addr is reachable only from
// this machine: its host is a loopback address or "localhost". An empty
// or unspecified host listens on every interface.
func loopbackOnly(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// defaultAdminAddr is where the operational endpoints listen by default:
// the loopback interface, for a scraper or sidecar on the same host.
const defaultAdminAddr = "127.0.0.1:9091"

// displayURL turns a listener address into a URL a person can paste:
// an unspecified host (":8080") becomes localhost.
func displayURL(a net.Addr) string {
	host, port, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "localhost"
	}
	return "http://" + net.JoinHostPort(host, port)
}
