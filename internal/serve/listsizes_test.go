package serve

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/costguard/costguard/internal/redistest"
	"github.com/costguard/costguard/middleware"
)

// unslicedRepos selects octocat's repositories without first: their size
// is an assumption, list_sizes' or graphql.default_list_size.
const unslicedRepos = `{ user(login: "octocat") { repos { name } } }`

const listSizesConfig = `
plans:
  free: {burst: 5000, rate: 5000, per: 1h}
  anon: {burst: 500, rate: 500, per: 1h}
api_keys:
  key: {principal: alice, plan: free}
`

// list_sizes prices a list as @listSize(assumedSize:) would, is swapped by
// a reload, and a reload naming a field the schema lacks is refused, the
// running sizes staying. The admin API reports what the lists returned.
func TestListSizesConfigAndReload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "costguard.yaml")
	writeConfig(t, path, listSizesConfig+`list_sizes: {"User.repos": 2}`+"\n")
	reload := make(chan os.Signal)
	srv := startRunReloading(t, reload, "-addr", "127.0.0.1:0", "-config", path)
	price := func() (requested, actual int64) {
		t.Helper()
		resp, body := call(t, "POST", srv.url+"/graphql", "key", graphQLBody(t, unslicedRepos))
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
		c := decodeGraphQL(t, body).Extensions.Cost
		return c.RequestedQueryCost, *c.ActualQueryCost
	}
	requested := func() int64 { r, _ := price(); return r }
	// user 1 + 2 repositories assumed; octocat has 4: the overrun is
	// debited after the response.
	r, a := price()
	assert.EqualValues(t, []int64{1 + 2, 1 + 4}, []int64{r, a})

	writeConfig(t, path, listSizesConfig+`list_sizes: {"User.repos": 5}`+"\n")
	reload <- syscall.SIGHUP
	srv.stderr.waitFor(t, reloadedLine, 1)
	assert.EqualValues(t, 1+5, requested())

	writeConfig(t, path, listSizesConfig+`list_sizes: {"User.repoz": 5}`+"\n")
	reload <- syscall.SIGHUP
	logs := srv.stderr.waitFor(t, refusedLine, 1)
	assert.Contains(t, logs, `assumed size for \"User.repoz\": no such field`)
	assert.EqualValues(t, 1+5, requested(), "the running sizes stay")

	// 3 responses of 4 repositories, the first over its assumed 2.
	req, err := http.NewRequest("GET", srv.admin+"/admin/list-sizes", nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
	var answer struct {
		Fields []struct {
			Field                             string
			Assumed, Responses, Overruns, Max int64
			Suggested                         int64
		}
		AssumedSizes map[string]int `json:"assumed_sizes"`
		Schema       string
	}
	require.NoError(t, json.Unmarshal(body, &answer), "%s", body)
	require.Len(t, answer.Fields, 1, "%s", body)
	f := answer.Fields[0]
	assert.Equal(t, "User.repos", f.Field)
	assert.EqualValues(t, []int64{5, 3, 1, 4, 4}, []int64{f.Assumed, f.Responses, f.Overruns, f.Max, f.Suggested})
	assert.Equal(t, map[string]int{"User.repos": 4}, answer.AssumedSizes)
	assert.Equal(t, "User.repos @listSize(assumedSize: 4)\n", answer.Schema)
}

// A list_sizes entry the schema cannot take stops the server at start.
func TestListSizesRefusedAtStart(t *testing.T) {
	for src, want := range map[string]string{
		`list_sizes: {"User.repoz": 3}`:  `"User.repoz": no such field`,
		`list_sizes: {"User.login": 3}`:  "User.login: the field is not a list",
		`list_sizes: {"User.repos": -1}`: "must not be negative",
	} {
		cfg, err := parseConfig([]byte(src))
		require.NoError(t, err)
		_, _, err = newServer(cfg, deps{})
		require.Error(t, err, src)
		assert.ErrorIs(t, err, errConfig, src)
		assert.ErrorIs(t, err, middleware.ErrInvalidConfig, src)
		assert.True(t, strings.Contains(err.Error(), want), "%s: %v", src, err)
	}
}

// With Redis, /admin/list-sizes answers for every process: a server that
// stops adds what it recorded on its way out, and another one's answer
// counts it.
func TestListSizesAcrossProcesses(t *testing.T) {
	rs := redistest.StartServer(t)
	a := startRun(t, "-addr", "127.0.0.1:0", "-redis", "redis://"+rs.Addr()+"/0")
	b := startRun(t, "-addr", "127.0.0.1:0", "-redis", "redis://"+rs.Addr()+"/0")
	for range 3 {
		resp, body := call(t, "POST", a.url+"/graphql", demoAPIKey, graphQLBody(t, unslicedRepos))
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
	}
	require.NoError(t, a.stop())
	resp, err := http.Get(b.admin + "/admin/list-sizes")
	require.NoError(t, err)
	defer resp.Body.Close()
	var answer struct {
		Fields []struct {
			Field          string
			Responses, Max int64
		}
		AssumedSizes map[string]int `json:"assumed_sizes"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&answer))
	require.Len(t, answer.Fields, 1)
	assert.Equal(t, "User.repos", answer.Fields[0].Field)
	assert.EqualValues(t, []int64{3, 4}, []int64{answer.Fields[0].Responses, answer.Fields[0].Max}, "a's three responses of octocat's 4 repositories")
	assert.Equal(t, map[string]int{"User.repos": 4}, answer.AssumedSizes)
}
