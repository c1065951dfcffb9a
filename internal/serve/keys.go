package serve

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/costguard/costguard/identity"
	"github.com/costguard/costguard/identity/keycache"
	"github.com/costguard/costguard/identity/pgkeys"
	"github.com/costguard/costguard/middleware/prommetrics"
)

// keySource is where API keys come from besides the configuration file,
// and how to let go of it.
type keySource struct {
	lookup   identity.KeyLookup   // nil: the file's keys only
	metrics  prometheus.Collector // the cache's, for /metrics; nil without one
	describe string               // for the start-up log; never holds a password
	close    func()               // Run calls it after the HTTP server has shut down
}

// openKeys connects to the PostgreSQL database at url (-keys-postgres),
// checks that its costguard_api_keys table answers, and puts keycache's
// default bounds in front of it. An empty url: no database.
func openKeys(ctx context.Context, url string) (*keySource, error) {
	if url == "" {
		return &keySource{close: func() {}}, nil
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("%w: -keys-postgres: %w", errUsage, err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("-keys-postgres: %w", err)
	}
	db, err := pgkeys.New(pool)
	if err == nil {
		cctx, cancel := context.WithTimeout(ctx, pingTimeout)
		err = db.Check(cctx)
		cancel()
	}
	var cache *keycache.Cache
	if err == nil {
		cache, err = keycache.New(db)
	}
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("-keys-postgres: %w", err)
	}
	return &keySource{
		lookup:   cache,
		metrics:  prommetrics.KeyCache(cache),
		describe: fmt.Sprintf("PostgreSQL at %s:%d, database %s", cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Database),
		close:    pool.Close,
	}, nil
}
