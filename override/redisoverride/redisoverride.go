// Package redisoverride is the override.Store for Redis: the overrides of
// every process sharing one Redis (standalone, Sentinel or Cluster), each
// change made by one Lua script.
//
// # Keys
//
// Three keys under one hash tag, so that a Cluster keeps them in one slot
// and each script touches one node:
//
//	<prefix>:{overrides}:all      HASH  principal key -> the override's JSON
//	<prefix>:{overrides}:expiry   ZSET  principal key -> until, ms since the epoch
//	<prefix>:{overrides}:version  the version, INCRed by every change
//
// A Watcher polls the version key (one GET) and reads the hash again only
// when it moved. Expired overrides are removed by the next Put and by the
// Watcher's Purge, judged by the caller's clock.
package redisoverride

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/costguard/costguard/override"
)

var (
	//go:embed put.lua
	putLua string
	//go:embed delete.lua
	deleteLua string
	//go:embed purge.lua
	purgeLua string
	//go:embed load.lua
	loadLua string
	//go:embed expire.lua
	expireLua string // purge, shared by put and purge

	putScript    = redis.NewScript(expireLua + putLua)
	deleteScript = redis.NewScript(deleteLua)
	purgeScript  = redis.NewScript(expireLua + purgeLua)
	loadScript   = redis.NewScript(loadLua)
)

// Client is what the store needs of a go-redis client: scripts and GET.
// *redis.Client, *redis.ClusterClient and redis.UniversalClient fit.
type Client interface {
	redis.Scripter
	Get(ctx context.Context, key string) *redis.StringCmd
}

// DefaultPrefix starts every key, as redisstore's keys do by default.
const DefaultPrefix = "costguard"

// Config configures a Store.
type Config struct {
	// Client reaches the Redis. Required.
	Client Client
	// Prefix starts every key. Default DefaultPrefix.
	Prefix string
	// MaxOverrides is the most principals with an override at once.
	// Default override.DefaultMaxOverrides.
	MaxOverrides int
}

// Store is an override.Store in Redis.
type Store struct {
	c    Client
	keys []string // all, expiry, version
	max  int
}

var _ override.Store = (*Store)(nil)

// New validates cfg and returns a Store.
func New(cfg Config) (*Store, error) {
	if cfg.Client == nil {
		return nil, errors.New("redisoverride: Config.Client is nil")
	}
	if cfg.MaxOverrides < 0 {
		return nil, fmt.Errorf("redisoverride: MaxOverrides %d is negative", cfg.MaxOverrides)
	}
	p := cfg.Prefix
	if p == "" {
		p = DefaultPrefix
	}
	m := cfg.MaxOverrides
	if m == 0 {
		m = override.DefaultMaxOverrides
	}
	tag := p + ":{overrides}:"
	return &Store{c: cfg.Client, keys: []string{tag + "all", tag + "expiry", tag + "version"}, max: m}, nil
}

// Keys returns the store's three keys: the hash, the expiry set, the version.
func (s *Store) Keys() []string { return append([]string(nil), s.keys...) }

// Put implements override.Store.
func (s *Store) Put(ctx context.Context, key string, o override.Override, now time.Time) error {
	js, err := json.Marshal(o)
	if err != nil {
		return fmt.Errorf("redisoverride: %w", err)
	}
	var until int64
	if !o.Until.IsZero() {
		until = max(o.Until.UnixMilli(), 1)
	}
	v, err := putScript.Run(ctx, s.c, s.keys, key, js, until, now.UnixMilli(), s.max).Int64()
	if err != nil {
		return fmt.Errorf("redisoverride: put: %w", err)
	}
	if v < 0 {
		return fmt.Errorf("%w: %d principals have one (the most this store holds)", override.ErrFull, s.max)
	}
	return nil
}

// Delete implements override.Store.
func (s *Store) Delete(ctx context.Context, key string) (bool, error) {
	n, err := deleteScript.Run(ctx, s.c, s.keys, key).Int64()
	if err != nil {
		return false, fmt.Errorf("redisoverride: delete: %w", err)
	}
	return n > 0, nil
}

// Version implements override.Store.
func (s *Store) Version(ctx context.Context) (int64, error) {
	v, err := s.c.Get(ctx, s.keys[2]).Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("redisoverride: version: %w", err)
	}
	return v, nil
}

// Load implements override.Store. An entry that does not decode (written
// by another version of the code) is left out.
func (s *Store) Load(ctx context.Context) (map[string]override.Override, int64, error) {
	res, err := loadScript.Run(ctx, s.c, s.keys).Slice()
	if err != nil {
		return nil, 0, fmt.Errorf("redisoverride: load: %w", err)
	}
	if len(res) == 0 || len(res)%2 != 1 {
		return nil, 0, fmt.Errorf("redisoverride: load: a reply of %d values", len(res))
	}
	v, ok := res[0].(int64)
	if !ok {
		return nil, 0, fmt.Errorf("redisoverride: load: the version is a %T", res[0])
	}
	out := make(map[string]override.Override, (len(res)-1)/2)
	for i := 1; i+1 < len(res); i += 2 {
		k, _ := res[i].(string)
		js, _ := res[i+1].(string)
		var o override.Override
		if err := json.Unmarshal([]byte(js), &o); err != nil {
			continue
		}
		out[k] = o
	}
	return out, v, nil
}

// Purge implements override.Store.
func (s *Store) Purge(ctx context.Context, now time.Time) error {
	if err := purgeScript.Run(ctx, s.c, s.keys, now.UnixMilli()).Err(); err != nil {
		return fmt.Errorf("redisoverride: purge: %w", err)
	}
	return nil
}
