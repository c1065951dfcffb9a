package pgkeys_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/costguard/costguard/identity"
	"github.com/costguard/costguard/identity/keycache"
	"github.com/costguard/costguard/identity/pgkeys"
	"github.com/costguard/costguard/internal/pgtest"
)

// countingQuerier counts the queries sent through it and whether each had
// a deadline.
type countingQuerier struct {
	pgkeys.Querier
	queries     atomic.Int64
	noDeadlines atomic.Int64
}

func (q *countingQuerier) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	q.queries.Add(1)
	if _, ok := ctx.Deadline(); !ok {
		q.noDeadlines.Add(1)
	}
	return q.Querier.QueryRow(ctx, sql, args...)
}

// TestPostgres runs every test that needs a server on one server: each
// starts in about two seconds.
func TestPostgres(t *testing.T) {
	srv := pgtest.Start(t)
	pool := srv.Pool(t)
	ctx := t.Context()

	t.Run("migrate, again and at once", func(t *testing.T) {
		var wg sync.WaitGroup
		errs := make([]error, 4)
		for i := range errs {
			wg.Go(func() { errs[i] = pgkeys.Migrate(ctx, pool) })
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		if err := pgkeys.Migrate(ctx, pool); err != nil {
			t.Fatal(err)
		}
	})

	// The rows, added as docs/keys.md adds them: the key hashed in SQL.
	_, err := pool.Exec(ctx, `INSERT INTO costguard_api_keys (key_sha256, principal, plan, disabled, expires_at) VALUES
		(encode(sha256(convert_to('alice-key', 'UTF8')), 'hex'), 'alice', 'free', false, NULL),
		(encode(sha256(convert_to('bob-key', 'UTF8')), 'hex'), 'bob', 'pro', false, now() + interval '1 hour'),
		(encode(sha256(convert_to('carol-key', 'UTF8')), 'hex'), 'carol', 'free', true, NULL),
		(encode(sha256(convert_to('dave-key', 'UTF8')), 'hex'), 'dave', 'free', false, now() - interval '1 second'),
		(encode(sha256(convert_to('service-key', 'UTF8')), 'hex'), '', 'pro', false, NULL),
		(encode(sha256(convert_to('ключ-🔑', 'UTF8')), 'hex'), 'erin', 'free', false, NULL)`)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("lookups", func(t *testing.T) {
		q := &countingQuerier{Querier: pool}
		keys, err := pgkeys.New(q)
		if err != nil {
			t.Fatal(err)
		}
		if err := keys.Check(ctx); err != nil {
			t.Fatal(err)
		}
		for _, tt := range []struct {
			key, principal, plan string
			unknown              bool
		}{
			{key: "alice-key", principal: "alice", plan: "free"},
			{key: "bob-key", principal: "bob", plan: "pro"},
			{key: "carol-key", unknown: true}, // disabled
			{key: "dave-key", unknown: true},  // expired
			{key: "service-key", principal: "", plan: "pro"},
			{key: "ключ-🔑", principal: "erin", plan: "free"},
			{key: "nobody-key", unknown: true},
			{key: "alice-key ", unknown: true},
			{key: "", unknown: true},
		} {
			principal, plan, err := keys.LookupAPIKey(ctx, tt.key)
			if tt.unknown {
				if !errors.Is(err, identity.ErrUnknownAPIKey) {
					t.Errorf("%q: %q %q, %v; want unknown", tt.key, principal, plan, err)
				}
				continue
			}
			if err != nil || principal != tt.principal || plan != tt.plan {
				t.Errorf("%q: %q %q, %v; want %q %q", tt.key, principal, plan, err, tt.principal, tt.plan)
			}
		}
		if n := q.noDeadlines.Load(); n != 0 {
			t.Errorf("%d of %d queries ran without a deadline", n, q.queries.Load())
		}
	})

	t.Run("the hash is HashAPIKey's", func(t *testing.T) {
		var got string
		if err := pool.QueryRow(ctx, "SELECT encode(sha256(convert_to('alice-key', 'UTF8')), 'hex')").Scan(&got); err != nil {
			t.Fatal(err)
		}
		if want := identity.HashAPIKey("alice-key"); got != want {
			t.Fatalf("SQL hashes alice-key to %s, HashAPIKey to %s", got, want)
		}
	})

	t.Run("the table refuses a raw key", func(t *testing.T) {
		_, err := pool.Exec(ctx, `INSERT INTO costguard_api_keys (key_sha256, plan) VALUES ('frank-key', 'free')`)
		if err == nil || !strings.Contains(err.Error(), "check constraint") {
			t.Fatalf("inserting a raw key: %v; want a check constraint violation", err)
		}
	})

	t.Run("through the cache", func(t *testing.T) {
		q := &countingQuerier{Querier: pool}
		db, err := pgkeys.New(q)
		if err != nil {
			t.Fatal(err)
		}
		keys, err := keycache.New(db)
		if err != nil {
			t.Fatal(err)
		}
		for range 100 {
			if p, _, err := keys.LookupAPIKey(ctx, "alice-key"); p != "alice" || err != nil {
				t.Fatalf("alice-key: %q, %v", p, err)
			}
			if _, _, err := keys.LookupAPIKey(ctx, "nobody-key"); !errors.Is(err, identity.ErrUnknownAPIKey) {
				t.Fatalf("nobody-key: %v", err)
			}
		}
		if n := q.queries.Load(); n != 2 {
			t.Fatalf("%d queries for 200 lookups of two keys, want 2", n)
		}
	})

	t.Run("a cancelled lookup is an error, not an unknown key", func(t *testing.T) {
		keys, err := pgkeys.New(pool)
		if err != nil {
			t.Fatal(err)
		}
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if _, _, err := keys.LookupAPIKey(cctx, "alice-key"); err == nil || errors.Is(err, identity.ErrUnknownAPIKey) {
			t.Fatalf("err %v, want a failed lookup", err)
		}
	})

	t.Run("check without the table", func(t *testing.T) {
		if _, err := pool.Exec(ctx, "CREATE DATABASE empty"); err != nil {
			t.Fatal(err)
		}
		empty, err := pgxpool.New(ctx, strings.Replace(srv.URL(), "/postgres?", "/empty?", 1))
		if err != nil {
			t.Fatal(err)
		}
		defer empty.Close()
		keys, err := pgkeys.New(empty)
		if err != nil {
			t.Fatal(err)
		}
		if err := keys.Check(ctx); err == nil || !strings.Contains(err.Error(), "migration") {
			t.Fatalf("Check on a database without the table: %v; want an error that names the migration", err)
		}
		if err := pgkeys.Migrate(ctx, empty); err != nil {
			t.Fatal(err)
		}
		if err := keys.Check(ctx); err != nil {
			t.Fatalf("Check after Migrate: %v", err)
		}
	})
}

// TestUnreachable: a database that does not answer is an error, never an
// unknown key, and the query gives up at the timeout.
func TestUnreachable(t *testing.T) {
	cfg, err := pgxpool.ParseConfig("postgres://postgres@127.0.0.1:1/postgres?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	keys, err := pgkeys.New(pool, pgkeys.WithQueryTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := keys.LookupAPIKey(t.Context(), "alice-key"); err == nil || errors.Is(err, identity.ErrUnknownAPIKey) {
		t.Fatalf("err %v, want a failed lookup", err)
	}
	if err := keys.Check(t.Context()); err == nil || strings.Contains(err.Error(), "migration") {
		t.Fatalf("Check with no database: %v; want an error that does not blame the migration", err)
	}
}

func TestOptions(t *testing.T) {
	if pgkeys.DefaultQueryTimeout != time.Second {
		t.Error("the default query timeout changed: update docs/keys.md and this test")
	}
	if _, err := pgkeys.New(nil); !errors.Is(err, pgkeys.ErrInvalidConfig) {
		t.Errorf("nil Querier: %v", err)
	}
	if _, err := pgkeys.New(&countingQuerier{}, pgkeys.WithQueryTimeout(0)); !errors.Is(err, pgkeys.ErrInvalidConfig) {
		t.Errorf("zero timeout: %v", err)
	}
}

// TestSchemaIsEmbedded: Schema is the file psql would apply.
func TestSchemaIsEmbedded(t *testing.T) {
	if s := pgkeys.Schema(); !strings.Contains(s, "CREATE TABLE IF NOT EXISTS "+pgkeys.Table+" (") {
		t.Fatalf("Schema() does not create %s:\n%s", pgkeys.Table, s)
	}
}

// TestSchemaIsDocumented: docs/keys.md shows the migration as it is.
func TestSchemaIsDocumented(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "keys.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), "```sql\n"+pgkeys.Schema()+"```\n") {
		t.Fatal("docs/keys.md does not show identity/pgkeys/schema.sql as it is: copy the file into its sql block")
	}
}
