package redisoverride_test

import (
	"bytes"
	"context"
	"log/slog"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/costguard/costguard/internal/redistest"
	"github.com/costguard/costguard/override"
	"github.com/costguard/costguard/override/redisoverride"
)

// redisEnv is a Redis the processes share and a way it loses overrides:
// client connects to the Redis the processes reach now; lose loses what
// was written since detach, or everything when partial is false (detach
// then does nothing).
type redisEnv struct {
	client  func() redis.UniversalClient
	partial bool
	detach  func(t *testing.T)
	lose    func(t *testing.T)
}

var losses = []struct {
	name  string
	setup func(t *testing.T) redisEnv
}{
	{"flush", func(t *testing.T) redisEnv {
		srv := redistest.StartServer(t)
		return redisEnv{
			client: func() redis.UniversalClient { return srv.Client(t) },
			detach: func(*testing.T) {},
			lose: func(t *testing.T) {
				if err := srv.Client(t).FlushAll(context.Background()).Err(); err != nil {
					t.Fatal(err)
				}
			},
		}
	}},
	{"restart without persistence", func(t *testing.T) redisEnv {
		srv := redistest.StartServer(t)
		return redisEnv{
			client: func() redis.UniversalClient { return srv.Client(t) },
			detach: func(*testing.T) {},
			lose: func(t *testing.T) {
				if err := srv.Restart(); err != nil {
					t.Fatal(err)
				}
			},
		}
	}},
	{"failover to a lagging replica", lagging},
}

// lagging starts a primary and its replica; the processes' clients dial
// whichever is the primary now, as a Sentinel's clients do. detach lets the
// replica catch up, then stops it following (it misses what comes next);
// lose kills the primary and sends the clients to the replica.
func lagging(t *testing.T) redisEnv {
	ctx := context.Background()
	primary, replica := redistest.StartServer(t), redistest.StartServer(t)
	for _, s := range []*redistest.Server{primary, replica} {
		if err := s.Client(t).ConfigSet(ctx, "repl-diskless-sync-delay", "0").Err(); err != nil {
			t.Fatal(err)
		}
	}
	rc := replica.Client(t)
	if err := rc.SlaveOf(ctx, "127.0.0.1", strconv.Itoa(primary.Port())).Err(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(rc.Info(ctx, "replication").Val(), "master_link_status:up") {
		if time.Now().After(deadline) {
			t.Fatal("the replica never synced")
		}
		time.Sleep(10 * time.Millisecond) // a real server's sync: real time
	}
	var addr atomic.Pointer[string]
	first := primary.Addr()
	addr.Store(&first)
	return redisEnv{
		partial: true,
		client: func() redis.UniversalClient {
			c := redis.NewClient(&redis.Options{Dialer: func(ctx context.Context, network, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, network, *addr.Load())
			}})
			t.Cleanup(func() { c.Close() })
			return c
		},
		detach: func(t *testing.T) {
			if n, err := primary.Client(t).Do(ctx, "WAIT", 1, 5000).Int(); err != nil || n != 1 {
				t.Fatalf("WAIT: %d replicas, %v", n, err)
			}
			if err := rc.SlaveOf(ctx, "NO", "ONE").Err(); err != nil {
				t.Fatal(err)
			}
		},
		lose: func(t *testing.T) {
			next := replica.Addr()
			addr.Store(&next)
			if err := primary.Stop(); err != nil {
				t.Fatal(err)
			}
		},
	}
}

// keys is what a watcher's snapshot holds, sorted.
func keys(w *override.Watcher, candidates ...string) []string {
	var out []string
	snap := w.Snapshot()
	for _, k := range candidates {
		if _, ok := snap.Find(k); ok {
			out = append(out, k)
		}
	}
	if snap.Len() != len(out) {
		out = append(out, "(and others)")
	}
	return out
}

var principals = []string{"user:bob", "user:carol", "user:dave"}

// stored is what the store holds, sorted.
func stored(t *testing.T, s override.Store) []string {
	all, _, err := s.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return slices.Sorted(maps.Keys(all))
}

// Two processes (a client and a Watcher each) share one Redis. One
// overrides carol (then bob, for a failover to a replica that has carol
// and misses bob); the Redis loses them (FLUSHALL; a restart without
// persistence; the failover); the same process overrides dave before any
// poll. The version then counts as many changes as before the loss, so a
// Watcher judging by the count alone keeps what the store lost and misses
// dave. The process that wrote dave must apply the store's overrides at
// once, the other after one poll. The polls are counted, not timed: each
// Refresh is one.
func TestWatchersConvergeAfterDataLoss(t *testing.T) {
	for _, l := range losses {
		t.Run(l.name, func(t *testing.T) {
			ctx := context.Background()
			env := l.setup(t)
			var ws [2]*override.Watcher
			var logs [2]bytes.Buffer
			for i := range ws {
				s, err := redisoverride.New(redisoverride.Config{Client: env.client()})
				if err != nil {
					t.Fatal(err)
				}
				w, err := override.NewWatcher(ctx, s, override.WithPollInterval(0),
					override.WithLogger(slog.New(slog.NewTextHandler(&logs[i], nil))))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(w.Close)
				ws[i] = w
			}
			truth, _ := redisoverride.New(redisoverride.Config{Client: env.client()})
			pro := override.Override{Plan: "pro"}
			if err := ws[0].Put(ctx, "user:carol", pro); err != nil {
				t.Fatal(err)
			}
			before := []string{"user:carol"}
			if env.partial {
				env.detach(t)
				if err := ws[0].Put(ctx, "user:bob", pro); err != nil {
					t.Fatal(err)
				}
				before = []string{"user:bob", "user:carol"}
			}
			if err := ws[1].Refresh(ctx); err != nil {
				t.Fatal(err)
			}
			for i, w := range ws {
				if got := keys(w, principals...); !slices.Equal(got, before) {
					t.Fatalf("process %d before the loss: %v", i, got)
				}
			}
			env.lose(t)
			if err := ws[0].Put(ctx, "user:dave", pro); err != nil {
				t.Fatal(err)
			}
			want := stored(t, truth)
			if !slices.Contains(want, "user:dave") || slices.Contains(want, before[0]) {
				t.Fatalf("the store holds %v after the loss and dave's override", want)
			}
			if got := keys(ws[0], principals...); !slices.Equal(got, want) {
				t.Errorf("the process that overrode dave applies %v, the store holds %v", got, want)
			}
			if err := ws[1].Refresh(ctx); err != nil {
				t.Fatal(err)
			}
			if got := keys(ws[1], principals...); !slices.Equal(got, want) {
				t.Errorf("the other process, after a poll, applies %v; the store holds %v", got, want)
			}
			for i := range logs {
				if !strings.Contains(logs[i].String(), "lost changes") {
					t.Errorf("process %d did not log the loss: %q", i, logs[i].String())
				}
			}
		})
	}
}

// The same in real time: two processes polling every
// DefaultPollInterval; carol, the loss and dave within one poll interval
// (the failover's replica misses carol). Both apply exactly the
// store's overrides within a second of dave's override: the process that
// wrote it at once.
func TestWatchersConvergeAfterDataLossInRealTime(t *testing.T) {
	for _, l := range losses {
		t.Run(l.name, func(t *testing.T) {
			ctx := context.Background()
			env := l.setup(t)
			var ws [2]*override.Watcher
			for i := range ws {
				s, err := redisoverride.New(redisoverride.Config{Client: env.client()})
				if err != nil {
					t.Fatal(err)
				}
				w, err := override.NewWatcher(ctx, s)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(w.Close)
				ws[i] = w
			}
			truth, _ := redisoverride.New(redisoverride.Config{Client: env.client()})
			pro := override.Override{Plan: "pro"}
			env.detach(t) // a failover's replica misses carol
			if err := ws[0].Put(ctx, "user:carol", pro); err != nil {
				t.Fatal(err)
			}
			// Wait for the other process to apply carol (at most a poll).
			converge(t, ws[1], []string{"user:carol"}, time.Second)
			// carol, the loss and dave within one poll: the loss is
			// timed from carol's override, as the attack does it.
			env.lose(t)
			if err := ws[0].Put(ctx, "user:dave", pro); err != nil {
				t.Fatal(err)
			}
			want := stored(t, truth)
			if !slices.Equal(want, []string{"user:dave"}) {
				t.Fatalf("the store holds %v", want)
			}
			if got := keys(ws[0], principals...); !slices.Equal(got, want) {
				t.Errorf("the process that overrode dave applies %v at once, want %v", got, want)
			}
			took := converge(t, ws[1], want, time.Second)
			t.Logf("%s: the other process applied exactly %v %v after dave's override", l.name, want, took.Round(time.Millisecond))
		})
	}
}

// converge waits until w holds exactly want, failing t after limit; it
// returns how long it took.
func converge(t *testing.T, w *override.Watcher, want []string, limit time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for !slices.Equal(keys(w, principals...), want) {
		if time.Since(start) > limit {
			t.Fatalf("after %v the process applies %v, want %v", limit, keys(w, principals...), want)
		}
		time.Sleep(2 * time.Millisecond) // the watcher polls in real time
	}
	return time.Since(start)
}
