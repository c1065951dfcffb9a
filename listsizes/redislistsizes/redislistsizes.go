// Package redislistsizes merges the list sizes several processes record
// (complexity.ListSizeRecorder) in Redis, so that the suggestions of any
// of them (GET /admin/list-sizes, admin.SharedListSizes) rest on every
// process's traffic, across restarts: each process adds what its
// recorder gathered since its last publish every Interval, off the
// request path, and a query reads the sum.
//
// One Redis hash, the Prefix (one key, so one Cluster slot), holds per
// field coordinate its counters as hash fields "<coordinate>:responses",
// ":overruns", ":max", ":assumed" and ":b<bucket>" (the buckets of
// complexity.ListSizeStats.Buckets that are not empty): at most
// complexity.MaxRecordedListFields coordinates are read back. Counts are
// added (HINCRBY), the largest list raised, the assumed size set, by one
// script call per 64 fields that changed; the key lives TTL after the last
// publish. A publish that fails is retried with its sums at the next tick;
// one that Redis applied but whose answer was lost is added again, so the
// counts are at least what was recorded. Delete the key to start over.
package redislistsizes

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/costguard/costguard/complexity"
)

// Defaults of a zero Config.
const (
	DefaultPrefix   = "costguard:list-sizes"
	DefaultInterval = 10 * time.Second
	DefaultTTL      = 30 * 24 * time.Hour
)

// ErrInvalidConfig wraps New's errors.
var ErrInvalidConfig = errors.New("redislistsizes: invalid config")

// Config configures a Shared.
type Config struct {
	// Client reaches the Redis (standalone, Sentinel or Cluster).
	Client redis.UniversalClient
	// Recorder is this process's.
	Recorder *complexity.ListSizeRecorder
	// Prefix is the hash's key. Default DefaultPrefix.
	Prefix string
	// Interval is how often Run publishes. Default 10 s: a query sees
	// another process's responses at most that late.
	Interval time.Duration
	// TTL is how long the sums outlive the last publish of any process.
	// Default 30 days.
	TTL time.Duration
}

//go:embed add.lua
var addLua string

var addScript = redis.NewScript(addLua)

// fieldsPerCall bounds the fields one script call adds, so that a call's
// arguments stay small whatever the recorder holds.
const fieldsPerCall = 64

// Shared publishes a recorder's sizes and reads everyone's.
type Shared struct {
	cfg Config
	// mu makes publishes one at a time; published is what this process
	// has added to Redis so far, per coordinate.
	mu        sync.Mutex
	published map[string]complexity.ListSizeStats
}

// New checks cfg.
func New(cfg Config) (*Shared, error) {
	if cfg.Client == nil || cfg.Recorder == nil {
		return nil, fmt.Errorf("%w: a Client and a Recorder are required", ErrInvalidConfig)
	}
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultPrefix
	}
	if cfg.Interval == 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.TTL == 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.Interval < 0 || cfg.TTL < time.Millisecond {
		return nil, fmt.Errorf("%w: interval %v and ttl %v must be positive", ErrInvalidConfig, cfg.Interval, cfg.TTL)
	}
	return &Shared{cfg: cfg, published: map[string]complexity.ListSizeStats{}}, nil
}

// change is what one field adds to the hash.
type change struct {
	field   string
	now     complexity.ListSizeStats
	adds    []string // hash field, delta pairs
	max     []string // hash field, value
	assumed []string
}

// Publish adds what the recorder gathered since the last publish.
func (s *Shared) Publish(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var changes []change
	for _, now := range s.cfg.Recorder.Fields() {
		if c, ok := s.diff(now); ok {
			changes = append(changes, c)
		}
	}
	for batch := range slices.Chunk(changes, fieldsPerCall) {
		var adds, maxima, assumed []string
		for _, c := range batch {
			adds, maxima, assumed = append(adds, c.adds...), append(maxima, c.max...), append(assumed, c.assumed...)
		}
		args := []any{s.cfg.TTL.Milliseconds(), len(adds) / 2, len(maxima) / 2}
		for _, group := range [][]string{adds, maxima, assumed} {
			for _, a := range group {
				args = append(args, a)
			}
		}
		if err := addScript.Run(ctx, s.cfg.Client, []string{s.cfg.Prefix}, args...).Err(); err != nil {
			return fmt.Errorf("redislistsizes: publishing: %w", err)
		}
		for _, c := range batch {
			s.published[c.field] = c.now
		}
	}
	return nil
}

// diff is what now adds to what this process published of its field;
// false when nothing changed.
func (s *Shared) diff(now complexity.ListSizeStats) (change, bool) {
	was := s.published[now.Field]
	c := change{field: now.Field, now: now}
	add := func(counter string, delta int64) {
		if delta > 0 {
			c.adds = append(c.adds, now.Field+":"+counter, strconv.FormatInt(delta, 10))
		}
	}
	add("responses", now.Responses-was.Responses)
	add("overruns", now.Overruns-was.Overruns)
	for i, n := range now.Buckets {
		var before int64
		if i < len(was.Buckets) {
			before = was.Buckets[i]
		}
		add("b"+strconv.Itoa(i), n-before)
	}
	if now.Max > was.Max || now.Responses > 0 && was.Responses == 0 {
		c.max = []string{now.Field + ":max", strconv.FormatInt(now.Max, 10)}
	}
	if now.Assumed != was.Assumed {
		c.assumed = []string{now.Field + ":assumed", strconv.FormatInt(now.Assumed, 10)}
	}
	return c, len(c.adds)+len(c.max)+len(c.assumed) > 0
}

// ListSizes returns the sizes every process published, summed per field
// and sorted by coordinate: admin.SharedListSizes. What this process
// recorded since its last publish is not in it yet.
func (s *Shared) ListSizes(ctx context.Context) ([]complexity.ListSizeStats, error) {
	fields, err := s.cfg.Client.HGetAll(ctx, s.cfg.Prefix).Result()
	if err != nil {
		return nil, fmt.Errorf("redislistsizes: reading: %w", err)
	}
	byField := map[string]*complexity.ListSizeStats{}
	for k, v := range fields {
		i := strings.LastIndexByte(k, ':')
		n, err := strconv.ParseInt(v, 10, 64)
		if i <= 0 || err != nil || n < 0 {
			continue // not ours
		}
		coord, counter := k[:i], k[i+1:]
		st := byField[coord]
		if st == nil {
			if len(byField) >= complexity.MaxRecordedListFields {
				continue
			}
			st = &complexity.ListSizeStats{Field: coord}
			byField[coord] = st
		}
		set(st, counter, n)
	}
	out := make([]complexity.ListSizeStats, 0, len(byField))
	for _, st := range byField {
		out = append(out, *st)
	}
	slices.SortFunc(out, func(a, b complexity.ListSizeStats) int { return strings.Compare(a.Field, b.Field) })
	return out, nil
}

// set stores counter's value n in st.
func set(st *complexity.ListSizeStats, counter string, n int64) {
	switch counter {
	case "responses":
		st.Responses = n
	case "overruns":
		st.Overruns = n
	case "max":
		st.Max = n
	case "assumed":
		st.Assumed = n
	default:
		b, err := strconv.Atoi(strings.TrimPrefix(counter, "b"))
		if err != nil || !strings.HasPrefix(counter, "b") || b < 0 || b >= complexity.ListSizeBuckets {
			return
		}
		if b >= len(st.Buckets) {
			st.Buckets = append(st.Buckets, make([]int64, b+1-len(st.Buckets))...)
		}
		st.Buckets[b] = n
	}
}

// Run publishes every Interval until ctx ends, and once more then (with
// a context of its own, bounded by Interval) so that what was recorded
// last is not lost; a failed publish is reported to onError (nil:
// ignored) and its sums tried again at the next tick.
func (s *Shared) Run(ctx context.Context, onError func(error)) {
	tick := time.NewTicker(s.cfg.Interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			final, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.Interval)
			defer cancel()
			if err := s.Publish(final); err != nil && onError != nil {
				onError(err)
			}
			return
		case <-tick.C:
		}
		if err := s.Publish(ctx); err != nil && onError != nil && ctx.Err() == nil {
			onError(err)
		}
	}
}
