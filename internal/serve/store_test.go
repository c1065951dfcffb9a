package serve

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/costguard/costguard/internal/redistest"
	"github.com/costguard/costguard/middleware"
)

// -redis and $REDIS_URL take a bare host:port as well as a URL: the form
// redis-cli -h/-p users and docker-compose files write.
func TestRunWithRedisHostPort(t *testing.T) {
	rs := redistest.StartServer(t)
	srv := startRun(t, "-addr", "127.0.0.1:0", "-redis", rs.Addr())
	assert.Equal(t, "Redis at "+rs.Addr()+", db 0", srv.budgets)
	resp := get(t, srv.url+"/api/search?q=octo")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "490", resp.Header.Get(middleware.HeaderXRateLimitRemaining))

	// A second process finds the same Redis through REDIS_URL=host:port.
	t.Setenv("REDIS_URL", rs.Addr())
	other := startRun(t, "-addr", "127.0.0.1:0")
	assert.Equal(t, srv.budgets, other.budgets)
	resp = get(t, other.url+"/api/users/octocat")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "489", resp.Header.Get(middleware.HeaderXRateLimitRemaining), "the two share one budget")
}

func TestRedisOptions(t *testing.T) {
	tests := []struct {
		in, addr, user, password string
		db                       int
		tls                      bool
	}{
		{in: "127.0.0.1:16400", addr: "127.0.0.1:16400"},
		{in: "[::1]:6379", addr: "[::1]:6379"},
		{in: "[fe80::1%eth0]:6379", addr: "[fe80::1%eth0]:6379"},
		{in: "localhost:6379", addr: "localhost:6379"},
		// A docker-compose service named redis: a host, not a URL scheme.
		{in: "redis:6379", addr: "redis:6379"},
		{in: "cache-1.internal_net.example:6380", addr: "cache-1.internal_net.example:6380"},
		{in: ":6379", addr: ":6379"},
		{in: "redis://localhost:6379/0", addr: "localhost:6379"},
		{in: "redis://localhost", addr: "localhost:6379"},
		{in: "redis://[::1]:6379/2", addr: "[::1]:6379", db: 2},
		{in: "redis://:s3cret@10.0.0.5:6380/3", addr: "10.0.0.5:6380", password: "s3cret", db: 3},
		{in: "redis://app:s3cret@10.0.0.5:6380", addr: "10.0.0.5:6380", user: "app", password: "s3cret"},
		{in: "rediss://cache.example:6380/1", addr: "cache.example:6380", db: 1, tls: true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			opts, err := redisOptions(tt.in)
			require.NoError(t, err)
			assert.Equal(t, tt.addr, opts.Addr)
			assert.Equal(t, tt.db, opts.DB)
			assert.Equal(t, tt.user, opts.Username)
			assert.Equal(t, tt.password, opts.Password)
			assert.Equal(t, tt.tls, opts.TLSConfig != nil, "TLS")
		})
	}
}

// Garbage fails at start, as a usage error naming where the value came
// from, what is wrong and the forms that work; never repeating a password.
func TestOpenStoreRefusesGarbage(t *testing.T) {
	tests := []struct {
		in      string
		errMsg  string
		secrets string // must not appear in the error
	}{
		{in: "garbage", errMsg: `-redis: "garbage" is not host:port; or write a URL: redis://host:port/db`},
		{in: "localhost", errMsg: `"localhost" is not host:port`},
		{in: "127.0.0.1:", errMsg: `"127.0.0.1:" is not host:port`},
		{in: "127.0.0.1:redis", errMsg: `the port must be a number from 1 to 65535`},
		{in: "127.0.0.1:0", errMsg: `the port must be a number from 1 to 65535`},
		{in: "127.0.0.1:65536", errMsg: `the port must be a number from 1 to 65535`},
		{in: "::1:6379", errMsg: `an IPv6 address goes in brackets, as in [::1]:6379`},
		{in: "localhost:6379/2", errMsg: `the port must be a number from 1 to 65535; or write a URL`},
		{in: "my host:6379", errMsg: `"my host" is neither a host name nor an IP address`},
		{in: "s3cret@localhost:6379", errMsg: "a user or password needs a URL: redis://[user]:password@host:port/db", secrets: "s3cret"},
		{in: "http://127.0.0.1:1", errMsg: "-redis: redis: invalid URL scheme: http"},
		{in: "redis://:s3cret@localhost:port/0", errMsg: "-redis: not a valid URL: ", secrets: "s3cret"},
		{in: "redis://localhost:6379/db", errMsg: "-redis: redis: invalid database number"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			st, err := openStore(t.Context(), tt.in, "")
			require.Error(t, err)
			assert.Nil(t, st)
			assert.ErrorIs(t, err, errUsage)
			assert.Contains(t, err.Error(), tt.errMsg)
			if tt.secrets != "" {
				assert.NotContains(t, err.Error(), tt.secrets)
			}
		})
	}
}

// $REDIS_URL is read with the same rules, and its errors name it rather
// than a flag that was not given.
func TestOpenStoreNamesREDIS_URL(t *testing.T) {
	t.Setenv("REDIS_URL", "localhost")
	_, err := openStore(t.Context(), "", "")
	require.ErrorIs(t, err, errUsage)
	assert.Contains(t, err.Error(), `$REDIS_URL: "localhost" is not host:port`)
	assert.NotContains(t, err.Error(), "-redis:")
}

// -redis-cluster seeds are checked as -redis's host:port is.
func TestSplitAddrs(t *testing.T) {
	addrs, err := splitAddrs(" 10.0.0.1:7000, [::1]:7001,redis-0.redis:7002 ,")
	require.NoError(t, err)
	assert.Equal(t, []string{"10.0.0.1:7000", "[::1]:7001", "redis-0.redis:7002"}, addrs)
	for in, errMsg := range map[string]string{
		"10.0.0.1:7000,nohost":        `"nohost" is not host:port`,
		"10.0.0.1:70000":              "the port must be a number from 1 to 65535",
		"redis://10.0.0.1:7000":       `"redis://10.0.0.1:7000" is not host:port`,
		"::1:7000":                    "an IPv6 address goes in brackets",
		" , ":                         "no addresses",
		"10.0.0.1:7000;10.0.0.2:7000": `"10.0.0.1:7000;10.0.0.2:7000" is not host:port`,
	} {
		_, err := splitAddrs(in)
		if assert.Error(t, err, in) {
			assert.Contains(t, err.Error(), errMsg, in)
		}
	}
}
