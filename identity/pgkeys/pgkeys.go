// Package pgkeys is an identity.KeyLookup backed by a PostgreSQL table,
// costguard_api_keys, which holds the SHA-256 of each key (never the key),
// the principal and plan it grants, and whether it is disabled or when it
// expires. Schema returns the table's migration and Migrate applies it.
//
// Every request with an API key would cost a query: put the lookup behind
// identity/keycache, which bounds the queries a flood of random keys can
// cause, and size the pool for what remains.
//
//	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
//	…
//	if err := pgkeys.Migrate(ctx, pool); err != nil { … } // or psql, see Schema
//	db, err := pgkeys.New(pool)
//	…
//	keys, err := keycache.New(db)
//	lim, err := middleware.New(middleware.Dependencies{KeyLookup: keys, …}, policy)
//
// docs/keys.md shows the table, how to add and revoke keys, and the
// cache's bounds.
package pgkeys

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/costguard/costguard/identity"
)

// DefaultQueryTimeout bounds each query, within the caller's own deadline.
const DefaultQueryTimeout = time.Second

// Table is the table's name, fixed by the migration.
const Table = "costguard_api_keys"

// lookupQuery finds a key's grant; a disabled or expired key has none.
// Expiry is judged by the database's clock.
const lookupQuery = `SELECT principal, plan FROM ` + Table + `
WHERE key_sha256 = $1 AND NOT disabled AND (expires_at IS NULL OR expires_at > now())`

//go:embed schema.sql
var schema string

// Schema returns the migration that creates the table, a script of SQL
// statements meant to run as one transaction (see Migrate).
func Schema() string { return schema }

// Errors.
var (
	// ErrInvalidConfig wraps every option error New returns.
	ErrInvalidConfig = errors.New("pgkeys: invalid config")
)

// Querier runs a query that returns at most one row: a *pgxpool.Pool, a
// *pgx.Conn or a pgx.Tx.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Execer runs SQL statements: a *pgxpool.Pool or a *pgx.Conn.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Migrate applies Schema through db, within ctx. It is safe to run again
// and from several processes at once. db must not be in a transaction of
// its own: without arguments, pgx sends the script as one simple query,
// which PostgreSQL runs as one transaction.
func Migrate(ctx context.Context, db Execer) error {
	if _, err := db.Exec(ctx, schema); err != nil {
		return fmt.Errorf("pgkeys: migrate: %w", err)
	}
	return nil
}

// Option configures New.
type Option func(*Lookup) error

// WithQueryTimeout bounds each query (DefaultQueryTimeout), within the
// caller's own deadline.
func WithQueryTimeout(d time.Duration) Option {
	return func(l *Lookup) error {
		if d <= 0 {
			return fmt.Errorf("%w: query timeout %v: it must be positive", ErrInvalidConfig, d)
		}
		l.timeout = d
		return nil
	}
}

// Lookup resolves API keys from the table. Its methods are safe for
// concurrent use if db's are (a pool's are).
type Lookup struct {
	db      Querier
	timeout time.Duration
}

var _ identity.KeyLookup = (*Lookup)(nil)

// New returns a lookup that queries db.
func New(db Querier, opts ...Option) (*Lookup, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: nil Querier", ErrInvalidConfig)
	}
	l := &Lookup{db: db, timeout: DefaultQueryTimeout}
	for _, o := range opts {
		if err := o(l); err != nil {
			return nil, err
		}
	}
	return l, nil
}

// LookupAPIKey implements identity.KeyLookup: one query by the key's
// SHA-256. A key that is not in the table, disabled or expired is
// identity.ErrUnknownAPIKey; a failed query is another error.
func (l *Lookup) LookupAPIKey(ctx context.Context, apiKey string) (principal, plan string, err error) {
	return l.lookup(ctx, identity.HashAPIKey(apiKey))
}

func (l *Lookup) lookup(ctx context.Context, hash string) (principal, plan string, err error) {
	ctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	err = l.db.QueryRow(ctx, lookupQuery, hash).Scan(&principal, &plan)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return "", "", identity.ErrUnknownAPIKey
	case err != nil:
		return "", "", fmt.Errorf("pgkeys: look up a key: %w", err)
	}
	return principal, plan, nil
}

// Check runs the lookup's query once, for a key nobody has, so that a
// missing table, a missing column or a missing privilege fails at start
// rather than at the first request.
func (l *Lookup) Check(ctx context.Context) error {
	const nobody = "0000000000000000000000000000000000000000000000000000000000000000"
	_, _, err := l.lookup(ctx, nobody)
	if errors.Is(err, identity.ErrUnknownAPIKey) {
		return nil
	}
	if err == nil {
		return errors.New("pgkeys: check: the all-zero hash is a key: remove that row")
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == undefinedTable || pgErr.Code == undefinedColumn) {
		return fmt.Errorf("%w (is the migration applied? pgkeys.Migrate or docs/keys.md)", err)
	}
	return err
}

// SQLSTATE codes of a missing table and a missing column.
const (
	undefinedTable  = "42P01"
	undefinedColumn = "42703"
)
