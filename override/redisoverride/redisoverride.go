// Package redisoverride is the override.Store for Redis: the overrides of
// every process sharing one Redis (standalone, Sentinel or Cluster), each
// change made by one Lua script.
//
// # Keys
//
// Three keys under one hash tag, so that a Cluster keeps them in one slot
// and each script touches one node:
//
//	<prefix>:{overrides}:all      HASH  principal key -> the override's JSON,
//	                                    and "#change" -> the id of the last change
//	<prefix>:{overrides}:expiry   ZSET  principal key -> until, ms since the epoch
//	<prefix>:{overrides}:version  the count of changes, INCRed by every change
//
// The version (override.Version) is the count and the id. Every change
// draws a random id and keeps it in the hash with the overrides, so that
// a Redis that loses them (FLUSHALL, a restart without persistence, a
// failover to a replica that missed the last changes, eviction) loses the
// id too: when it counts back to a count a process has seen, the id is
// another, and every Watcher reads the overrides again.
//
// A Watcher polls the version (one script reading the two) and reads the
// hash again only when it is not the one it holds. Expired overrides are
// removed by the next Put and by the Watcher's Purge, judged by the
// caller's clock.
package redisoverride

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/costguard/costguard/override"
)

var (
	//go:embed change.lua
	changeLua string // the version and purge, opening every script
	//go:embed put.lua
	putLua string
	//go:embed delete.lua
	deleteLua string
	//go:embed purge.lua
	purgeLua string
	//go:embed load.lua
	loadLua string
	//go:embed version.lua
	versionLua string

	putScript     = redis.NewScript(changeLua + putLua)
	deleteScript  = redis.NewScript(changeLua + deleteLua)
	purgeScript   = redis.NewScript(changeLua + purgeLua)
	loadScript    = redis.NewScript(changeLua + loadLua)
	versionScript = redis.NewScript(changeLua + versionLua)
)

// changeField is the hash's field that holds the id of the last change
// (change.lua's CHANGE): no principal key, which starts "user:", "key:" or
// "ip:" (override.Principal).
const changeField = "#change"

// Client is what the store needs of a go-redis client: scripts.
// *redis.Client, *redis.ClusterClient and redis.UniversalClient fit.
type Client interface {
	redis.Scripter
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

// Keys returns the store's three keys: the hash, the expiry set, the
// count of changes.
func (s *Store) Keys() []string { return append([]string(nil), s.keys...) }

// Put implements override.Store.
func (s *Store) Put(ctx context.Context, key string, o override.Override, now time.Time) (override.Version, error) {
	if key == changeField {
		return override.Version{}, fmt.Errorf("%w: %q is the store's own field", override.ErrInvalidPrincipal, key)
	}
	js, err := json.Marshal(o)
	if err != nil {
		return override.Version{}, fmt.Errorf("redisoverride: %w", err)
	}
	var until int64
	if !o.Until.IsZero() {
		until = max(o.Until.UnixMilli(), 1)
	}
	ok, v, err := s.change(ctx, putScript, key, js, until, now.UnixMilli(), s.max)
	if err != nil {
		return v, fmt.Errorf("redisoverride: put: %w", err)
	}
	if ok < 0 {
		return v, fmt.Errorf("%w: %d principals have one (the most this store holds)", override.ErrFull, s.max)
	}
	return v, nil
}

// Delete implements override.Store.
func (s *Store) Delete(ctx context.Context, key string) (bool, override.Version, error) {
	if key == changeField {
		return false, override.Version{}, fmt.Errorf("%w: %q is the store's own field", override.ErrInvalidPrincipal, key)
	}
	n, v, err := s.change(ctx, deleteScript, key)
	if err != nil {
		return false, v, fmt.Errorf("redisoverride: delete: %w", err)
	}
	return n > 0, v, nil
}

// Purge implements override.Store.
func (s *Store) Purge(ctx context.Context, now time.Time) (override.Version, error) {
	_, v, err := s.change(ctx, purgeScript, now.UnixMilli())
	if err != nil {
		return v, fmt.Errorf("redisoverride: purge: %w", err)
	}
	return v, nil
}

// change runs a script that may change the overrides, with args and then
// a fresh change id, and reads its answer: {result, count, id}.
func (s *Store) change(ctx context.Context, script *redis.Script, args ...any) (int64, override.Version, error) {
	res, err := script.Run(ctx, s.c, s.keys, append(args, rand.Text())...).Slice()
	if err != nil {
		return 0, override.Version{}, err
	}
	if len(res) != 3 {
		return 0, override.Version{}, fmt.Errorf("a reply of %d values", len(res))
	}
	n, ok := res[0].(int64)
	if !ok {
		return 0, override.Version{}, fmt.Errorf("the result is a %T", res[0])
	}
	v, err := version(res[1:])
	return n, v, err
}

// version reads {count, id} from a script's reply.
func version(res []any) (override.Version, error) {
	n, ok := res[0].(int64)
	if !ok {
		return override.Version{}, fmt.Errorf("the version's count is a %T", res[0])
	}
	id, ok := res[1].(string)
	if !ok {
		return override.Version{}, fmt.Errorf("the version's id is a %T", res[1])
	}
	return override.Version{N: n, ID: id}, nil
}

// Version implements override.Store.
func (s *Store) Version(ctx context.Context) (override.Version, error) {
	res, err := versionScript.Run(ctx, s.c, s.keys).Slice()
	if err == nil && len(res) != 2 {
		err = fmt.Errorf("a reply of %d values", len(res))
	}
	var v override.Version
	if err == nil {
		v, err = version(res)
	}
	if err != nil {
		return override.Version{}, fmt.Errorf("redisoverride: version: %w", err)
	}
	return v, nil
}

// Load implements override.Store. An entry that does not decode (written
// by another version of the code) is left out.
func (s *Store) Load(ctx context.Context) (map[string]override.Override, override.Version, error) {
	res, err := loadScript.Run(ctx, s.c, s.keys).Slice()
	if err != nil {
		return nil, override.Version{}, fmt.Errorf("redisoverride: load: %w", err)
	}
	if len(res) < 2 || len(res)%2 != 0 {
		return nil, override.Version{}, fmt.Errorf("redisoverride: load: a reply of %d values", len(res))
	}
	v, err := version(res[:2])
	if err != nil {
		return nil, override.Version{}, fmt.Errorf("redisoverride: load: %w", err)
	}
	out := make(map[string]override.Override, (len(res)-2)/2)
	for i := 2; i+1 < len(res); i += 2 {
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
