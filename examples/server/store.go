package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/costguard/costguard/limiter/redisstore"
	"github.com/costguard/costguard/middleware"
)

// pingTimeout bounds the start-up check that Redis answers: a server
// pointed at a Redis it cannot reach fails at start, not at the first
// request.
const pingTimeout = 3 * time.Second

// budgetStore is where the budgets live and how to let go of it.
type budgetStore struct {
	store middleware.Store // nil: the limiter's own in-memory store
	// ping asks the store whether it answers, within ctx (the start-up
	// check and /readyz); nil for the in-memory store, which always does.
	ping     func(ctx context.Context) error
	describe string       // for the start-up line; never holds a password
	close    func() error // run calls it after the HTTP server has shut down
}

// openStore connects to a single Redis (redisURL, else $REDIS_URL) or a
// Cluster (clusterAddrs, comma-separated host:port seeds), or returns the
// in-memory default when neither is given. -redis and -redis-cluster
// exclude each other; an explicit -redis-cluster overrides $REDIS_URL.
func openStore(ctx context.Context, redisURL, clusterAddrs string) (*budgetStore, error) {
	if redisURL != "" && clusterAddrs != "" {
		return nil, fmt.Errorf("%w: -redis and -redis-cluster exclude each other", errUsage)
	}
	if redisURL == "" && clusterAddrs == "" {
		redisURL = os.Getenv("REDIS_URL")
	}
	var (
		client   redis.UniversalClient
		ping     func(context.Context) error
		describe string
	)
	switch {
	case redisURL != "":
		opts, err := redis.ParseURL(redisURL)
		if err != nil {
			return nil, fmt.Errorf("%w: -redis: %w", errUsage, err)
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
	return &budgetStore{store: st, ping: ping, describe: describe, close: closeAll}, nil
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

// splitAddrs parses "host:port,host:port".
func splitAddrs(s string) ([]string, error) {
	var addrs []string
	for a := range strings.SplitSeq(s, ",") {
		a = strings.TrimSpace(a)
		if a == "" {
			continue
		}
		if _, port, err := net.SplitHostPort(a); err != nil || port == "" {
			return nil, fmt.Errorf("%q is not host:port", a)
		}
		addrs = append(addrs, a)
	}
	if len(addrs) == 0 {
		return nil, fmt.Errorf("no addresses in %q", s)
	}
	return addrs, nil
}
