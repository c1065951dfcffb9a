package serve

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/limiter/redisstore"
	"github.com/costguard/costguard/override"
	"github.com/costguard/costguard/override/redisoverride"
)

// pingTimeout bounds the start-up check that Redis answers: a server
// pointed at a Redis it cannot reach fails at start, not at the first
// request.
const pingTimeout = 3 * time.Second

// budgetStore is where the budgets live and how to let go of it.
type budgetStore struct {
	store limiter.Store // nil: the limiter's own in-memory store
	// overrides keeps the per-principal overrides in the same Redis; nil
	// in memory.
	overrides override.Store
	// shared is the Redis the processes share their top spenders through
	// (redisspenders); nil in memory.
	shared redis.UniversalClient
	// ping asks the store whether it answers, within ctx (the start-up
	// check and /readyz); nil for the in-memory store, which always does.
	ping     func(ctx context.Context) error
	describe string       // for the start-up line; never holds a password
	close    func() error // Run calls it after the HTTP server has shut down
}

// openStore connects to a single Redis (redisAddr, else $REDIS_URL) or a
// Cluster (clusterAddrs, comma-separated host:port seeds), or returns the
// in-memory default when neither is given. -redis and -redis-cluster
// exclude each other; an explicit -redis-cluster overrides $REDIS_URL.
// redisAddr and $REDIS_URL take a URL or host:port (redisOptions).
func openStore(ctx context.Context, redisAddr, clusterAddrs string) (*budgetStore, error) {
	if redisAddr != "" && clusterAddrs != "" {
		return nil, fmt.Errorf("%w: -redis and -redis-cluster exclude each other", errUsage)
	}
	source := "-redis"
	if redisAddr == "" && clusterAddrs == "" {
		redisAddr, source = os.Getenv("REDIS_URL"), "$REDIS_URL"
	}
	var (
		client   redis.UniversalClient
		ping     func(context.Context) error
		describe string
	)
	switch {
	case redisAddr != "":
		opts, err := redisOptions(redisAddr)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %w", errUsage, source, err)
		}
		// Honour the middleware's per-call deadline on the socket too.
		opts.ContextTimeoutEnabled = true
		c := redis.NewClient(opts)
		client, ping = c, func(ctx context.Context) error { return c.Ping(ctx).Err() }
		describe = fmt.Sprintf("Redis at %s, db %d", opts.Addr, opts.DB)
	case clusterAddrs != "":
		addrs, err := splitAddrs(clusterAddrs)
		if err != nil {
			return nil, fmt.Errorf("%w: -redis-cluster: %w", errUsage, err)
		}
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true})
		client, ping = c, func(ctx context.Context) error { return pingMasters(ctx, c) }
		describe = "Redis Cluster via " + strings.Join(addrs, ",")
	default:
		return &budgetStore{describe: "in memory", close: func() error { return nil }}, nil
	}

	pctx, cancel := context.WithTimeout(ctx, pingTimeout)
	defer cancel()
	if err := ping(pctx); err != nil {
		client.Close()
		return nil, fmt.Errorf("%s does not answer: %w", describe, err)
	}
	st, err := redisstore.New(client, redisstore.Config{})
	if err != nil {
		client.Close()
		return nil, err
	}
	// The store owns the goroutines that coalesce calls into batches: stop
	// them (after the round trips in flight) before closing the client they
	// use.
	closeAll := func() error { return errors.Join(st.Close(), client.Close()) }
	ov, err := redisoverride.New(redisoverride.Config{Client: client})
	if err != nil {
		return nil, errors.Join(err, closeAll())
	}
	return &budgetStore{store: st, overrides: ov, shared: client, ping: ping, describe: describe, close: closeAll}, nil
}

// pingMasters pings every master of the Cluster, at once. Each master
// holds the budgets of its hash slots, so one that does not answer fails
// the requests of the principals it holds: the Cluster is ready only when
// all of them answer. Replicas hold no budget the store reads.
func pingMasters(ctx context.Context, c *redis.ClusterClient) error {
	return c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		if err := m.Ping(ctx).Err(); err != nil {
			return fmt.Errorf("master %s: %w", m.Options().Addr, err)
		}
		return nil
	})
}

// redisOptions reads the address of one Redis, as -redis and $REDIS_URL
// take it: a URL (redis://[[user]:password@]host[:port][/db], rediss:// for
// TLS, unix:///path/to/socket, as go-redis's ParseURL reads them) or a bare
// host:port ("127.0.0.1:6379", "[::1]:6379", "redis:6379"), which means
// db 0, no password, no TLS. Its errors never repeat a password.
func redisOptions(s string) (*redis.Options, error) {
	if strings.Contains(s, "://") {
		opts, err := redis.ParseURL(s)
		var ue *url.Error
		if errors.As(err, &ue) {
			// url.Error quotes the whole URL, password included.
			return nil, fmt.Errorf("not a valid URL: %w", ue.Err)
		}
		return opts, err
	}
	if strings.Contains(s, "@") {
		return nil, errors.New("a user or password needs a URL: redis://[user]:password@host:port/db")
	}
	if err := checkHostPort(s); err != nil {
		return nil, fmt.Errorf("%w; or write a URL: redis://host:port/db", err)
	}
	return &redis.Options{Addr: s}, nil
}

// checkHostPort accepts the address of one Redis node: host:port, the host
// a name or an IP address (IPv6 in brackets), the port a number from 1 to
// 65535. An empty host is the local machine, as go-redis dials it.
func checkHostPort(a string) error {
	host, port, err := net.SplitHostPort(a)
	switch {
	case err != nil && isUnbracketedIPv6(a):
		return fmt.Errorf("%q is not host:port: an IPv6 address goes in brackets, as in [::1]:6379", a)
	case err != nil, port == "":
		return fmt.Errorf("%q is not host:port", a)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("%q is not host:port: the port must be a number from 1 to 65535", a)
	}
	if _, err := netip.ParseAddr(host); err != nil && !isHostName(host) {
		return fmt.Errorf("%q is not host:port: %q is neither a host name nor an IP address", a, host)
	}
	return nil
}

// isUnbracketedIPv6 reports whether a is an IPv6 address and a port
// written without the brackets: "::1:6379".
func isUnbracketedIPv6(a string) bool {
	i := strings.LastIndexByte(a, ':')
	return i > 0 && strings.Contains(a[:i], ":") && net.ParseIP(a[:i]) != nil
}

// isHostName reports whether s is made of the characters of a DNS name
// (letters, digits, '-', '_' and '.'); "" is the local machine.
func isHostName(s string) bool {
	for _, r := range s {
		if !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || r == '-' || r == '_' || r == '.') {
			return false
		}
	}
	return true
}

// splitAddrs parses "host:port,host:port", each as checkHostPort accepts it.
func splitAddrs(s string) ([]string, error) {
	var addrs []string
	for a := range strings.SplitSeq(s, ",") {
		a = strings.TrimSpace(a)
		if a == "" {
			continue
		}
		if err := checkHostPort(a); err != nil {
			return nil, err
		}
		addrs = append(addrs, a)
	}
	if len(addrs) == 0 {
		return nil, fmt.Errorf("no addresses in %q", s)
	}
	return addrs, nil
}
