package serve

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/costguard/costguard/internal/redistest"
)

const adminTestToken = "an-admin-token-of-some-length"

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// The admin API needs a token unless its listener is loopback-only; the
// token comes from a file or, as its hash, from the configuration.
func TestAdminTokenRules(t *testing.T) {
	dir := t.TempDir()
	file := func(name, content string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
		return p
	}
	good := file("good", adminTestToken+"\n")
	short := file("short", "tiny\n")
	twoLines := file("two", adminTestToken+"\nmore-of-the-token\n")
	for _, tc := range []struct {
		name, file, configured, addr string
		want, err                    string
	}{
		{name: "loopback, no token", addr: "127.0.0.1:9091"},
		{name: "IPv6 loopback", addr: "[::1]:9091"},
		{name: "localhost", addr: "localhost:0"},
		{name: "no admin listener", addr: ""},
		{name: "every interface, no token", addr: ":9091", err: "reachable from other machines"},
		{name: "unspecified, no token", addr: "0.0.0.0:9091", err: "reachable from other machines"},
		{name: "a public address, no token", addr: "192.0.2.1:9091", err: "give it a token"},
		{name: "token file", file: good, addr: ":9091", want: sha256Hex(adminTestToken)},
		{name: "configured hash", configured: sha256Hex("x"), addr: ":9091", want: sha256Hex("x")},
		{name: "both", file: good, configured: sha256Hex("x"), addr: ":9091", err: "exclude each other"},
		{name: "short token", file: short, addr: ":9091", err: "at least 16 bytes"},
		{name: "two lines", file: twoLines, addr: ":9091", err: "one line"},
		{name: "missing file", file: filepath.Join(dir, "none"), addr: ":9091", err: "-admin-token-file"},
	} {
		got, err := adminTokenSHA256(tc.file, tc.configured, tc.addr)
		if tc.err != "" {
			if assert.Error(t, err, tc.name) {
				assert.ErrorIs(t, err, errUsage, tc.name)
				assert.Contains(t, err.Error(), tc.err, tc.name)
			}
			continue
		}
		assert.NoError(t, err, tc.name)
		assert.Equal(t, tc.want, got, tc.name)
	}
	_, err := parseConfig([]byte("admin: {token_sha256: not-a-hash}\n"))
	assert.ErrorContains(t, err, "admin.token_sha256 must be a SHA-256 in hex")
}

// The admin listener serves the override API behind the token, and an
// override applies to the public routes at once in this process.
func TestAdminAPIOnTheAdminListener(t *testing.T) {
	cfg := defaultConfig()
	cfg.Plans["pro"] = planConfig{Plan: cfg.Plans["free"].Plan}
	p := cfg.Plans["pro"]
	p.Burst, p.Rate = 50000, 50000
	cfg.Plans["pro"] = p
	s, cleanup, err := newServer(cfg, deps{logger: discardLogger(), adminTokenSHA256: sha256Hex(adminTestToken)})
	require.NoError(t, err)
	defer cleanup()
	admin := httptest.NewServer(s.admin)
	defer admin.Close()
	public := httptest.NewServer(s)
	defer public.Close()

	status, _ := adminCall(t, admin.URL, http.MethodPut, "/admin/principals/alice/override", "", `{"plan":"pro"}`)
	assert.Equal(t, http.StatusUnauthorized, status)
	status, body := adminCall(t, admin.URL, http.MethodPut, "/admin/principals/alice/override", adminTestToken, `{"plan":"pro"}`)
	require.Equal(t, http.StatusOK, status, body)
	assert.Equal(t, `"pro";q=50000;w=3600`, policyOf(t, public.URL))
	status, body = adminCall(t, admin.URL, http.MethodGet, "/admin/principals/alice", adminTestToken, "")
	require.Equal(t, http.StatusOK, status, body)
	// The budgets as they stand, then the one decision this process saw.
	assert.True(t, strings.HasPrefix(body, `{"principal":"user:alice","plan":"pro","override":{"plan":"pro"},"policies":[{"name":"pro","limit":50000,"remaining":49999,"reset_seconds":1}],"recent":[{"time":`), body)
	assert.Contains(t, body, `"kind":"rest","plan":"pro","principal_plan":"free","requested":1,"actual":0,"has_actual":false,"charged":1,"refunded":0,"excess":0,"net":1,"outcome":"admitted"}]}`)
	// The public port has no admin API.
	resp, err := http.Get(public.URL + "/admin/principals/alice")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusNotFound, resp.StatusCode)
}

// Without a token, the admin listener answers no page that rebinds its
// own name to 127.0.0.1: a PUT under a foreign Host, with its matching
// Origin and a JSON body (which a page of that origin may send), is
// refused and the next public answer carries no override; a GET of a
// principal or of /metrics under that Host is refused too. The same PUT
// for 127.0.0.1 is answered.
func TestAdminListenerRefusesRebinding(t *testing.T) {
	s, cleanup, err := newServer(defaultConfig(), deps{logger: discardLogger()})
	require.NoError(t, err)
	defer cleanup()
	admin := httptest.NewServer(s.admin)
	defer admin.Close()
	public := httptest.NewServer(s)
	defer public.Close()
	before := policyOf(t, public.URL)

	port := admin.URL[strings.LastIndexByte(admin.URL, ':')+1:]
	rebound := "rebind.attacker.example:" + port
	send := func(method, path, host, body string) (int, string) {
		t.Helper()
		return adminDo(t, method, admin.URL+path, body, func(req *http.Request) {
			req.Host = host
			req.Header.Set("Origin", "http://"+host)
		})
	}
	const billion = `{"burst":1000000000,"rate":1000000000,"per":"1h"}`
	status, body := send(http.MethodPut, "/admin/principals/alice/override", rebound, billion)
	assert.Equal(t, http.StatusForbidden, status)
	assert.Contains(t, body, `"code":"foreign_host"`)
	assert.Equal(t, before, policyOf(t, public.URL), "the next public answer carries no override")
	for _, path := range []string{"/admin/principals/alice", "/admin/top", "/metrics", "/healthz"} {
		status, body = send(http.MethodGet, path, rebound, "")
		assert.Equal(t, http.StatusForbidden, status, "%s: %s", path, body)
	}

	status, body = send(http.MethodPut, "/admin/principals/alice/override", "127.0.0.1:"+port, billion)
	require.Equal(t, http.StatusOK, status, body)
	assert.Equal(t, `"override:free";q=1000000000;w=3600`, policyOf(t, public.URL))
	status, body = send(http.MethodGet, "/metrics", "localhost:"+port, "")
	assert.Equal(t, http.StatusOK, status, body)
}

// GET /admin/principals/alice (the dashboard's lookup) takes alice's plan
// from her latest decision also when an override was in force then, so it
// answers after an override that replaced limits, or the plan, or both,
// and after the override is deleted, before alice's next request.
func TestAdminLookupAfterOverride(t *testing.T) {
	cfg := defaultConfig()
	pro := cfg.Plans["free"]
	pro.Burst, pro.Rate = 50000, 50000
	cfg.Plans["pro"] = pro
	s, cleanup, err := newServer(cfg, deps{logger: discardLogger()})
	require.NoError(t, err)
	defer cleanup()
	admin := httptest.NewServer(s.admin)
	defer admin.Close()
	public := httptest.NewServer(s)
	defer public.Close()

	type state struct {
		Plan     string          `json:"plan"`
		Override json.RawMessage `json:"override"`
		Policies []struct {
			Name string `json:"name"`
		} `json:"policies"`
		Recent []struct {
			Plan          string `json:"plan"`
			PrincipalPlan string `json:"principal_plan"`
		} `json:"recent"`
	}
	lookup := func() (int, state) {
		t.Helper()
		status, body := adminCall(t, admin.URL, http.MethodGet, "/admin/principals/alice", "", "")
		var st state
		if status == http.StatusOK {
			require.NoError(t, json.Unmarshal([]byte(body), &st), body)
		}
		return status, st
	}
	decisions := 0
	for _, tc := range []struct {
		override, policy, inForce string
	}{
		{`{"burst":20000,"rate":20000,"per":"1h"}`, `"override:free";q=20000;w=3600`, "override:free"},
		{`{"plan":"pro"}`, `"pro";q=50000;w=3600`, "pro"},
		{`{"plan":"pro","burst":60000,"rate":60000}`, `"override:pro";q=60000;w=3600`, "override:pro"},
	} {
		status, body := adminCall(t, admin.URL, http.MethodPut, "/admin/principals/alice/override", "", tc.override)
		require.Equal(t, http.StatusOK, status, body)
		require.Equal(t, tc.policy, policyOf(t, public.URL))
		decisions++
		var st state
		awaitAdminJSON(t, admin.URL+"/admin/principals/alice", &st, func() bool { return len(st.Recent) == decisions })
		last := st.Recent[len(st.Recent)-1]
		assert.Equal(t, tc.inForce, last.Plan, tc.override)
		assert.Equal(t, "free", last.PrincipalPlan, "%s: alice's own plan, beside the one in force", tc.override)
		assert.Equal(t, tc.inForce, st.Policies[0].Name, tc.override)

		status, body = adminCall(t, admin.URL, http.MethodDelete, "/admin/principals/alice/override", "", "")
		require.Equal(t, http.StatusNoContent, status, body)
		status, st = lookup()
		require.Equal(t, http.StatusOK, status, "%s, deleted: the lookup before alice's next request", tc.override)
		assert.Equal(t, "free", st.Plan, "%s, deleted", tc.override)
		assert.Equal(t, "null", string(st.Override), "%s, deleted", tc.override)
		assert.Equal(t, "free", st.Policies[0].Name, "%s, deleted", tc.override)
	}
}

func adminCall(t *testing.T, base, method, path, token, body string) (int, string) {
	t.Helper()
	return adminDo(t, method, base+path, body, func(req *http.Request) {
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
	})
}

// adminDo sends an admin request, a write with the JSON type admin writes
// need, after set has added its headers, and returns its status and body.
func adminDo(t *testing.T, method, url, body string, set func(*http.Request)) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	require.NoError(t, err)
	if method != http.MethodGet {
		req.Header.Set("Content-Type", "application/json")
	}
	set(req)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b))
}

// policyOf is the RateLimit-Policy of a REST request with the demo key.
func policyOf(t *testing.T, base string) string {
	t.Helper()
	p, err := tryPolicyOf(base)
	require.NoError(t, err)
	return p
}

func tryPolicyOf(base string) (string, error) { return tryPolicyWith(base, demoAPIKey) }

// startRedisServerProcess starts the server as its own process with its
// budgets and overrides in the Redis at redisAddr, the admin token from a
// file, and the configuration yml.
func startRedisServerProcess(t *testing.T, redisAddr, yml string) *serverProcess {
	t.Helper()
	dir := t.TempDir()
	cfgPath, tokenPath := filepath.Join(dir, "costguard.yaml"), filepath.Join(dir, "admin-token")
	require.NoError(t, os.WriteFile(cfgPath, []byte(yml), 0o600))
	require.NoError(t, os.WriteFile(tokenPath, []byte(adminTestToken+"\n"), 0o600))
	return runServerProcess(t, "-config", cfgPath, "-redis", redisAddr, "-admin-token-file", tokenPath)
}

const propagationYAML = `plans:
  free: {burst: 5000, rate: 5000, per: 1h}
  anon: {burst: 500, rate: 500, per: 1h}
  pro: {burst: 50000, rate: 50000, per: 1h}
api_keys:
  demo-free-key: {principal: alice, plan: free}
`

// TestOverridePropagationAcrossProcesses runs three server processes on
// one Redis, sets an override through the admin API of the first and
// measures when each of the other two serves the principal by it (the
// RateLimit-Policy of its requests), then the same for a delete: within
// a second, the contract.
func TestOverridePropagationAcrossProcesses(t *testing.T) {
	rs := redistest.StartServer(t)
	procs := make([]*serverProcess, 3)
	for i := range procs {
		procs[i] = startRedisServerProcess(t, rs.Addr(), propagationYAML)
	}
	const free, pro = `"free";q=5000;w=3600`, `"pro";q=50000;w=3600`
	for _, p := range procs {
		require.Equal(t, free, policyOf(t, p.url))
	}
	measure := func(method, body, want string) {
		t.Helper()
		status, answer := adminCall(t, procs[0].admin, method, "/admin/principals/alice/override", adminTestToken, body)
		require.Contains(t, []int{http.StatusOK, http.StatusNoContent}, status, answer)
		set := time.Now()
		assert.Equal(t, want, policyOf(t, procs[0].url), "the process that made the change applies it at once")
		var wg sync.WaitGroup
		took := make([]time.Duration, len(procs))
		for i := 1; i < len(procs); i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				for ctx.Err() == nil {
					if got, err := tryPolicyOf(procs[i].url); err == nil && got == want {
						took[i] = time.Since(set)
						return
					}
					time.Sleep(5 * time.Millisecond) // polling a real process: real time
				}
				took[i] = -1
			}()
		}
		wg.Wait()
		for i := 1; i < len(procs); i++ {
			t.Logf("%s: process %d applied it after %v", method, i, took[i].Round(time.Millisecond))
			assert.True(t, took[i] >= 0 && took[i] < time.Second, "%s: process %d took %v (stderr: %s)", method, i, took[i], procs[i].stderr.String())
		}
	}
	measure(http.MethodPut, `{"plan":"pro"}`, pro)
	measure(http.MethodDelete, "", free)
}

const dataLossYAML = `plans:
  free: {burst: 5000, rate: 5000, per: 1h}
  anon: {burst: 500, rate: 500, per: 1h}
  pro: {burst: 50000, rate: 50000, per: 1h}
api_keys:
  carol-key-of-some-length: {principal: carol, plan: free}
  dave-key-of-some-length: {principal: dave, plan: free}
`

// TestOverridesConvergeAfterDataLossAcrossProcesses runs two server
// processes on one Redis. Through the first: carol gets an override,
// the Redis loses it (FLUSHALL; a restart without persistence), dave gets
// one within the same poll interval, so that the store counts as many
// changes as before. Both processes must then serve carol by her plan
// and dave by his override: the first at once, the second within a
// second.
func TestOverridesConvergeAfterDataLossAcrossProcesses(t *testing.T) {
	for _, tc := range []struct {
		name string
		lose func(rs *redistest.Server) error
	}{
		{"flush", func(rs *redistest.Server) error {
			c := redis.NewClient(&redis.Options{Addr: rs.Addr()})
			defer c.Close()
			return c.FlushAll(context.Background()).Err()
		}},
		{"restart", (*redistest.Server).Restart},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs := redistest.StartServer(t)
			procs := []*serverProcess{startRedisServerProcess(t, rs.Addr(), dataLossYAML), startRedisServerProcess(t, rs.Addr(), dataLossYAML)}
			const free, pro = `"free";q=5000;w=3600`, `"pro";q=50000;w=3600`
			policies := func(p *serverProcess) (carol, dave string) {
				carol, _ = tryPolicyWith(p.url, "carol-key-of-some-length")
				dave, _ = tryPolicyWith(p.url, "dave-key-of-some-length")
				return carol, dave
			}
			put := func(who string) {
				status, answer := adminCall(t, procs[0].admin, http.MethodPut, "/admin/principals/"+who+"/override", adminTestToken, `{"plan":"pro"}`)
				require.Equal(t, http.StatusOK, status, answer)
			}
			put("carol")
			deadline := time.Now().Add(5 * time.Second)
			for c, _ := policies(procs[1]); c != pro; c, _ = policies(procs[1]) {
				require.True(t, time.Now().Before(deadline), "the second process never applied carol's override")
				time.Sleep(5 * time.Millisecond) // polling a real process: real time
			}
			require.NoError(t, tc.lose(rs))
			put("dave")
			set := time.Now()
			c, d := policies(procs[0])
			assert.Equal(t, [2]string{free, pro}, [2]string{c, d}, "the process that overrode dave serves carol and dave by the store's overrides at once")
			var took time.Duration
			for {
				c, d := policies(procs[1])
				if c == free && d == pro {
					took = time.Since(set)
					break
				}
				if time.Since(set) > 3*time.Second {
					t.Fatalf("the second process still serves carol %s and dave %s (stderr: %s)", c, d, procs[1].stderr.String())
				}
				time.Sleep(5 * time.Millisecond) // polling a real process: real time
			}
			t.Logf("%s: the second process served carol and dave by the store's overrides %v after dave's override", tc.name, took.Round(time.Millisecond))
			assert.Less(t, took, time.Second)
		})
	}
}

// tryPolicyWith is the RateLimit-Policy of a REST request with the API key.
func tryPolicyWith(base, key string) (string, error) {
	req, _ := http.NewRequest(http.MethodGet, base+"/api/users/octocat", nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", errors.New(resp.Status)
	}
	return resp.Header.Get("RateLimit-Policy"), nil
}
