package serve

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/costguard/costguard/identity/pgkeys"
	"github.com/costguard/costguard/internal/pgtest"
	"github.com/costguard/costguard/middleware"
)

// With -keys-postgres, a key is looked up in the configuration file first,
// then in the database.
func TestRunWithPostgresKeys(t *testing.T) {
	pg := pgtest.Start(t)
	pool := pg.Pool(t)
	ctx := t.Context()
	require.NoError(t, pgkeys.Migrate(ctx, pool))
	_, err := pool.Exec(ctx, `INSERT INTO costguard_api_keys (key_sha256, principal, plan) VALUES
		(encode(sha256(convert_to('db-key', 'UTF8')), 'hex'), 'bob', 'free'),
		(encode(sha256(convert_to($1, 'UTF8')), 'hex'), 'mallory', 'anon'),
		(encode(sha256(convert_to('gold-key', 'UTF8')), 'hex'), 'carol', 'gold')`, demoAPIKey)
	require.NoError(t, err)

	srv := startRun(t, "-addr", "127.0.0.1:0", "-keys-postgres", pg.URL())
	for _, tt := range []struct {
		key    string
		status int
		policy string
	}{
		{"db-key", http.StatusOK, `"free";q=5000;w=3600`},
		{demoAPIKey, http.StatusOK, `"free";q=5000;w=3600`}, // the file's grant, not the database's
		{"nobody-key", http.StatusUnauthorized, ""},
		{"gold-key", http.StatusServiceUnavailable, ""}, // a plan the server does not have
	} {
		req, _ := http.NewRequest(http.MethodGet, srv.url+"/api/users/octocat", nil)
		req.Header.Set("Authorization", "Bearer "+tt.key)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		assert.Equal(t, tt.status, resp.StatusCode, tt.key)
		if tt.policy != "" {
			assert.Equal(t, tt.policy, resp.Header.Get(middleware.HeaderRateLimitPolicy), tt.key)
		}
	}
	// The cache in front of the database is on /metrics: "db-key" and
	// "nobody-key" were looked up ("gold-key" too), no key was answered twice.
	resp, err := http.Get(srv.admin + "/metrics")
	require.NoError(t, err)
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Contains(t, string(metrics), "costguard_key_cache_lookups_total 3\n")
	assert.Contains(t, string(metrics), `costguard_key_cache_entries{kind="unknown"} 1`+"\n")
	assert.Contains(t, srv.stderr.String(), "API keys from the configuration file, then from PostgreSQL at 127.0.0.1:")
	assert.NotContains(t, srv.stderr.String(), "db-key", "keys are never logged")
}

// A database the server cannot use stops it at start, with the flag named.
func TestRunRefusesPostgresKeys(t *testing.T) {
	pg := pgtest.Start(t)
	_, err := pg.Pool(t).Exec(t.Context(), "CREATE DATABASE unmigrated")
	require.NoError(t, err)
	for _, tt := range []struct {
		name, url string
		usage     bool
		errMsg    string
	}{
		{"not a URL", "postgres://[::1", true, "-keys-postgres:"},
		{"no table", strings.Replace(pg.URL(), "/postgres?", "/unmigrated?", 1), false, "is the migration applied?"},
		{"nobody there", "postgres://postgres@127.0.0.1:1/postgres?sslmode=disable", false, "-keys-postgres:"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var stdout strings.Builder
			err := Run(context.Background(), []string{"-addr", "127.0.0.1:0", "-admin-addr", "", "-keys-postgres", tt.url}, &stdout, io.Discard, nil, Options{})
			require.Error(t, err)
			assert.Equal(t, tt.usage, errors.Is(err, errUsage), "%v", err)
			assert.Contains(t, err.Error(), tt.errMsg)
			assert.Empty(t, stdout.String(), "nothing may listen")
		})
	}
}
