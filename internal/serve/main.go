// Package serve is the body of costguard's servers: flags, the YAML
// configuration and its reloads, the budget store, API keys, the limiter
// in front of a gqlgen handler, the probes, metrics and admin API, and a
// graceful shutdown. The example server (examples/server) is Main with
// the zero Options; another binary passes the Options that set it apart.
//
// Run (the whole process but its signals) and newServer (the handler)
// are what the tests drive directly.
package serve

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

	"github.com/99designs/gqlgen/graphql"

	"github.com/costguard/costguard/limiter/redisstore"
	"github.com/costguard/costguard/middleware"
)

// Options are what set one binary built on this package apart from
// another. The zero Options is the example server: its name, its
// start-up line, its flags, and the demo schema with the demo parts.
type Options struct {
	// Program names the binary: its flag set, the prefix of the errors
	// Main prints and of its log lines. "": "server".
	Program string
	// Banner opens the start-up line, "Banner on http://host:port
	// (budgets: …)". "": "costguard example server".
	Banner string
	// Flags, when set, adds the binary's own flags to fs before the
	// arguments are parsed, and returns what checks them after (nil:
	// nothing to check). An error of the check is a usage error: exit
	// status 2.
	Flags func(fs *flag.FlagSet) (check func() error)
	// Schema, when set, builds the schema served on /graphql in place of
	// the demo one: at start, after the flags are parsed and checked and
	// the configuration is read, before the budget store is opened (an
	// error stops the start); and again on each reload (SIGHUP), before
	// the -config file is re-read (an error keeps the running schema).
	// ctx is Run's; logger is the process's. The configuration's field
	// limits and trusted documents are checked against its Schema().
	Schema func(ctx context.Context, logger *slog.Logger) (graphql.ExecutableSchema, error)
	// NoDemo leaves the demo parts out: the REST routes under /api/, the
	// GraphiQL page on /, and demo_latency, which the configuration may
	// then not set. A Schema needs it: the demo parts serve the demo
	// schema's data.
	NoDemo bool
	// WrapGraphQL, when set, wraps the handler of /graphql once, outside
	// the limiter: it sees each request before the limiter does and each
	// status and header the limiter writes. A ResponseWriter it passes on
	// in place of its own must still hijack (WebSocket) and flush (SSE).
	// lim is the server's limiter, for what the wrapper answers itself
	// (lim.REST charges it as a REST request).
	WrapGraphQL func(next http.Handler, lim *middleware.Limiter) http.Handler
	// POST, when set, serves the JSON POST requests of /graphql in place of
	// gqlgen's transport.POST: a transport that writes a Schema's answers
	// faster than json.Marshal does, say. It answers the same requests the
	// same way.
	POST graphql.Transport
}

// defaults is the configuration a file is read over: the example's,
// without its demo parts when o leaves them out.
func (o Options) defaults() config {
	if o.NoDemo {
		return noDemoConfig()
	}
	return defaultConfig()
}

// program is o.Program, its default filled in.
func (o Options) program() string {
	if o.Program == "" {
		return "server"
	}
	return o.Program
}

// banner is o.Banner, its default filled in.
func (o Options) banner() string {
	if o.Banner == "" {
		return "costguard example server"
	}
	return o.Banner
}

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

// Main is a binary's func main: it runs Run with the process's arguments,
// stdout and stderr until SIGINT or SIGTERM, reloads the -config file on
// SIGHUP, and exits with status 2 for a usage or configuration error and
// 1 for any other, printing it after the program's name.
func Main(opts Options) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// SIGHUP reloads the -config file. One pending signal is enough: those
	// that arrive during a reload ask for the same file again.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	err := Run(ctx, os.Args[1:], os.Stdout, os.Stderr, hup, opts)
	signal.Stop(hup)
	stop()
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
	case errors.Is(err, errUsage), errors.Is(err, errConfig):
		fmt.Fprintln(os.Stderr, opts.program()+":", err)
		os.Exit(2)
	default:
		fmt.Fprintln(os.Stderr, opts.program()+":", err)
		os.Exit(1)
	}
}

// errUsage wraps errors in the command line.
var errUsage = errors.New("usage")

// flagValues are the command line, parsed.
type flagValues struct {
	addr, adminAddr    string
	redisAddr, cluster string
	keysPostgres       string
	adminTokenFile     string
	cfgPath            string
	level              slog.Level
	shutdownTimeout    time.Duration
}

// parseFlags parses args into the server's flags and opts.Flags'. Every
// error but flag.ErrHelp wraps errUsage.
func parseFlags(args []string, stderr io.Writer, opts Options) (flagValues, error) {
	fs := flag.NewFlagSet(opts.program(), flag.ContinueOnError)
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
	var check func() error
	if opts.Flags != nil {
		check = opts.Flags(fs)
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return flagValues{}, err
		}
		return flagValues{}, fmt.Errorf("%w: %w", errUsage, err)
	}
	if fs.NArg() > 0 {
		return flagValues{}, fmt.Errorf("%w: unexpected arguments %q", errUsage, fs.Args())
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil || strings.ContainsAny(*logLevel, "+-0123456789") {
		return flagValues{}, fmt.Errorf("%w: -log-level %q: write debug, info, warn or error", errUsage, *logLevel)
	}
	if *shutdownTimeout <= 0 {
		return flagValues{}, fmt.Errorf("%w: -shutdown-timeout %v: it must be positive", errUsage, *shutdownTimeout)
	}
	if check != nil {
		if err := check(); err != nil {
			return flagValues{}, fmt.Errorf("%w: %w", errUsage, err)
		}
	}
	return flagValues{
		addr: *addr, adminAddr: *adminAddr, redisAddr: *redisAddr, cluster: *cluster, keysPostgres: *keysPostgres,
		adminTokenFile: *adminTokenFile, cfgPath: *cfgPath, level: level, shutdownTimeout: *shutdownTimeout,
	}, nil
}

// Run serves until ctx is done, then shuts down gracefully. It prints the
// address it listens on to stdout, and flag errors and logs to stderr. Each
// value reload delivers re-reads the -config file (Main feeds it SIGHUP;
// nil: never). Its errors carry no program prefix: Main adds the one
// prefix.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer, reload <-chan os.Signal, opts Options) error {
	f, err := parseFlags(args, stderr, opts)
	if err != nil {
		return err
	}
	cfg, err := loadConfigOver(f.cfgPath, opts.defaults)
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: f.level}))
	adminToken, err := adminTokenSHA256(f.adminTokenFile, cfg.Admin.TokenSHA256, f.adminAddr)
	if err != nil {
		return err
	}
	// go-redis logs through a process-wide logger of its own: send its
	// pool messages to ours, at debug level, rather than to stderr.
	redisstore.SetGoRedisLogger(logger)
	d := deps{logger: logger, adminTokenSHA256: adminToken, opts: opts}
	if opts.Schema != nil {
		if d.schema, err = opts.Schema(ctx, logger); err != nil {
			return err
		}
		if d.schema == nil {
			return errors.New("Options.Schema returned no schema")
		}
	}

	// The shutdown runs the deferred calls below in reverse: after the HTTP
	// server has stopped (no request in flight), the limiter closes, which
	// returns split-budget leases and refunds through the store, and then
	// the store closes, which sends what its batcher holds and closes the
	// client.
	st, err := openStore(ctx, f.redisAddr, f.cluster)
	if err != nil {
		return err
	}
	defer st.close()
	d.store, d.ping, d.overrides, d.spendersShared = st.store, st.ping, st.overrides, st.shared

	keys, err := openKeys(ctx, f.keysPostgres)
	if err != nil {
		return err
	}
	defer keys.close()
	if keys.lookup != nil {
		logger.Info(opts.program() + ": API keys from the configuration file, then from " + keys.describe)
	}
	d.keys, d.keyMetrics = keys.lookup, keys.metrics

	h, cleanup, err := newServer(cfg, d)
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
		h.watchReloads(watchCtx, reload, f.cfgPath)
	}()
	defer func() {
		stopWatching()
		<-watching
	}()
	ln, adminLn, err := listen(f.addr, f.adminAddr)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s on %s (budgets: %s)\n", opts.banner(), displayURL(ln.Addr()), st.describe)
	return h.serve(ctx, ln, adminLn, stdout, f.shutdownTimeout, adminToken != "")
}

// listen opens the public listener at addr and, unless adminAddr is "",
// the admin listener at adminAddr.
func listen(addr, adminAddr string) (ln, adminLn net.Listener, err error) {
	if ln, err = net.Listen("tcp", addr); err != nil {
		return nil, nil, err // "listen tcp …: bind: address already in use"
	}
	if adminAddr != "" {
		if adminLn, err = net.Listen("tcp", adminAddr); err != nil {
			ln.Close()
			return nil, nil, fmt.Errorf("admin listener: %w", err)
		}
	}
	return ln, adminLn, nil
}

// serve serves s on ln and its admin handler on adminLn (nil: none) until
// ctx is done, then shuts down gracefully, waiting up to shutdownTimeout
// for the requests in flight. tokenAsked says whether the admin API asks
// for a bearer token.
func (s *server) serve(ctx context.Context, ln, adminLn net.Listener, stdout io.Writer, shutdownTimeout time.Duration, tokenAsked bool) error {
	srv := s.httpServer(s.Handler)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	if adminLn != nil {
		defer s.serveAdmin(adminLn, stdout, tokenAsked)()
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
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
	defer cancel()
	err := srv.Shutdown(sctx)
	if err != nil {
		err = errors.Join(err, srv.Close())
	}
	<-served // http.ErrServerClosed
	if err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	return nil
}

// serveAdmin serves the admin handler on ln, says where, and warns when
// its API asks for no token. It returns what stops it.
func (s *server) serveAdmin(ln net.Listener, stdout io.Writer, tokenAsked bool) (stop func()) {
	admin := s.httpServer(s.admin)
	fmt.Fprintf(stdout, "admin endpoints (/metrics, /healthz, /readyz) on %s\n", displayURL(ln.Addr()))
	fmt.Fprintf(stdout, "dashboard on %s/admin/\n", displayURL(ln.Addr()))
	if !tokenAsked {
		s.log.Warn(s.prog+": the admin API (/admin/principals/…) is served WITHOUT a token: the admin listener is loopback-only, so only this machine reaches it, and it answers only requests for 127.0.0.1, [::1] or localhost from no web page or its own; give -admin-token-file or admin.token_sha256 to ask for one",
			"admin_addr", ln.Addr().String())
	} else {
		s.log.Info(s.prog+": the admin API (/admin/principals/…) asks for a bearer token", "admin_addr", ln.Addr().String())
	}
	served := make(chan error, 1)
	go func() { served <- admin.Serve(ln) }()
	return func() {
		_ = admin.Close() // scrapes and probes need no graceful end
		<-served
	}
}

// httpServer is an HTTP server of the bounds above for handler, logging
// to s's logger.
func (s *server) httpServer(handler http.Handler) *http.Server {
	return &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
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
