package serve

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/costguard/costguard/internal/testenv"
)

// UpdateScreenshotEnv, set to 1, has TestDashboardInBrowser write the
// screenshot the README shows (docs/dashboard.png).
const updateScreenshotEnv = "COSTGUARD_UPDATE_SCREENSHOT"

// chromiumPath finds Debian's chromium (or a Chrome) on this machine.
func chromiumPath() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if _, err := os.Stat("/usr/bin/chromium"); err == nil {
		return "/usr/bin/chromium"
	}
	return ""
}

// The dashboard at /admin/, in a real headless Chromium, opened after a
// scripted load on an admin listener with a token: before the token it
// shows "–" for every figure; once the token is typed it draws the load
// from the history the server kept (no second reading needed), shows the
// top spender and the counts the JSON routes answer, looks a principal up
// and draws its decisions at their net points, fetches nothing outside
// the admin listener and logs no error.
func TestDashboardInBrowser(t *testing.T) {
	browser := chromiumPath()
	if browser == "" {
		testenv.Missing(t, "chromium is not installed (apt-get install chromium): the dashboard's browser test needs it")
		return
	}
	const adminToken = "a dashboard test token"
	tokenFile := filepath.Join(t.TempDir(), "admin-token")
	require.NoError(t, os.WriteFile(tokenFile, []byte(adminToken+"\n"), 0o600))
	srv := startRun(t, "-addr", "127.0.0.1:0", "-admin-addr", "127.0.0.1:0", "-admin-token-file", tokenFile)

	// The load: the demo API key searches (10 points each) more than the
	// anonymous client, whose budget (500 points) runs out.
	request := func(key string) int {
		req, _ := http.NewRequest(http.MethodGet, srv.url+"/api/search?q=octo", nil)
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	load := func(keyed, anonymous int) {
		for range keyed {
			require.Equal(t, http.StatusOK, request(demoAPIKey))
		}
		for range anonymous {
			request("")
		}
	}
	load(40, 60) // the anonymous client runs out of points after 50
	// One GraphQL query of the demo key, priced 61 and refunded what its
	// response did not use: its timeline bar is its net points.
	req, _ := http.NewRequest(http.MethodPost, srv.url+"/graphql", strings.NewReader(`{"query":"{ user(login: \"octocat\") { repos(first: 10) { issues(first: 5) { title } } } }"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+demoAPIKey)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)

	// A fresh profile, and none of Chromium's own connections (the machine
	// may have no network; the test asserts the page makes no request
	// elsewhere).
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(browser),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.WindowSize(1280, 1100),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	ctx, cancelTab := chromedp.NewContext(actx)
	defer cancelTab()
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()

	var mu sync.Mutex
	var requests, problems []string
	authorized := false // the page has the token: a 401 from then on is a problem
	require.NoError(t, chromedp.Listen(ctx, func(ev any) {
		mu.Lock()
		defer mu.Unlock()
		switch ev := ev.(type) {
		case *network.EventRequestWillBeSent:
			requests = append(requests, ev.Request.URL)
		case *runtime.EventConsoleAPICalled:
			if ev.Type == runtime.ConsoleAPICalledTypeError || ev.Type == runtime.ConsoleAPICalledTypeAssert || ev.Type == runtime.ConsoleAPICalledTypeWarning {
				var args []string
				for _, a := range ev.Args {
					args = append(args, string(a.Value)+a.Description)
				}
				problems = append(problems, "console."+string(ev.Type)+": "+strings.Join(args, " "))
			}
		case *runtime.EventExceptionThrown:
			d := ev.ExceptionDetails
			msg := d.Text
			if d.Exception != nil {
				msg += " " + d.Exception.Description
			}
			problems = append(problems, "exception: "+msg)
		case *log.EventEntryAdded:
			if !authorized && strings.Contains(ev.Entry.Text, "status of 401") {
				break // the page before its token: what this test asks of it
			}
			if ev.Entry.Level == log.EntryLevelError || ev.Entry.Level == log.EntryLevelWarning {
				problems = append(problems, "log "+string(ev.Entry.Level)+": "+ev.Entry.Text+" "+ev.Entry.URL)
			}
		}
	}), "starting Chromium")

	// updates reads how many polls the page has shown.
	updates := func() int {
		a, err := chromedp.Run(ctx, chromedp.AttributeValue(chromedp.CSS("body"), "data-updates"))
		require.NoError(t, err, "reading the page's updates")
		n, _ := strconv.Atoi(a.Value)
		return n
	}
	// waitUpdates waits until the page has shown n polls more than from.
	waitUpdates := func(from, n int, why string) int {
		deadline := time.Now().Add(15 * time.Second)
		for {
			u := updates()
			if u >= from+n {
				return u
			}
			if time.Now().After(deadline) {
				status, _ := chromedp.Run(ctx, chromedp.Text(chromedp.ID("status")))
				t.Fatalf("%s: the page showed %d updates in 15s, want %d (its status: %q)", why, u-from, n, status)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	text := func(id string) string {
		v, err := chromedp.Run(ctx, chromedp.TextContent(chromedp.ID(id)))
		require.NoError(t, err, "reading #%s", id)
		return strings.TrimSpace(v)
	}
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(srv.admin+"/admin/"),
		chromedp.WaitVisible(chromedp.ID("rate-chart")),
	), "loading the dashboard")
	// Without the token the server answers no figure, and the page shows
	// none: "–", not zeros.
	require.Eventually(t, func() bool { return strings.Contains(text("status"), "token is needed") }, 15*time.Second, 50*time.Millisecond,
		"the page's status before the token: %q", text("status"))
	for _, id := range []string{"count-total", "count-refused", "requested-points", "actual-points", "top-points", "fallbacks", "inflight", "capacity"} {
		assert.Equal(t, "–", text(id), "#%s before the token", id)
	}
	drawn, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("#rate-chart polyline").length`))
	require.NoError(t, err)
	assert.Zero(t, drawn, "a chart drawn before the token")
	require.NoError(t, chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.ID("token"), adminToken),
		chromedp.Click(chromedp.CSS("#token-form button")),
	), "typing the token")
	waitUpdates(0, 1, "the first poll with the token")
	mu.Lock()
	authorized = true
	mu.Unlock()
	// The load came before the page was opened: its one reading draws it
	// from the server's history.
	opened, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](
		`Array.from(document.querySelectorAll("#rate-chart polyline")).map((p) => p.dataset.series)`))
	require.NoError(t, err, "reading the rate chart")
	assert.Contains(t, opened, "admitted", "the load before the page opened, drawn from the history")
	assert.Contains(t, opened, "rate_limited", "the anonymous client's refusals, drawn from the history")
	// One request held in flight in the authenticated lane: a login whose
	// body never comes, so its handler waits with its slot.
	held, err := net.Dial("tcp", strings.TrimPrefix(srv.url, "http://"))
	require.NoError(t, err)
	defer held.Close()
	_, err = io.WriteString(held, "POST /api/login HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "+demoAPIKey+
		"\r\nContent-Type: application/json\r\nContent-Length: 64\r\n\r\n")
	require.NoError(t, err)
	// More load while the page watches, so its charts have rates; then
	// two polls more: polls run one after another, so the second began
	// after the load ended and saw all of it.
	load(40, 30)
	waitUpdates(updates(), 2, "the polls after the load")

	// What the JSON routes answer.
	getJSON := func(path string, v any) {
		req, _ := http.NewRequest(http.MethodGet, srv.admin+path, nil)
		req.Header.Set("Authorization", "Bearer "+adminToken)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode, path)
		require.NoError(t, json.NewDecoder(resp.Body).Decode(v), path)
	}
	var stats struct {
		InFlight struct {
			Capacity int `json:"capacity"`
			Lanes    []struct {
				Lane     string `json:"lane"`
				Priority string `json:"priority"`
				Now      int    `json:"now"`
				ShedAt   int    `json:"shed_at"`
			} `json:"lanes"`
		} `json:"in_flight"`
		Decisions map[string]int64 `json:"decisions"`
		Requested int64            `json:"requested_points"`
		Refusals  []struct {
			Code  string `json:"code"`
			Plan  string `json:"plan"`
			Count int64  `json:"count"`
		} `json:"refusals"`
	}
	getJSON("/admin/stats", &stats)
	var top struct {
		Reports []struct {
			Plan     string `json:"plan"`
			Spenders []struct {
				Principal string `json:"principal"`
				Points    int64  `json:"points"`
			} `json:"spenders"`
		} `json:"reports"`
	}
	getJSON("/admin/top?window=1m", &top)
	var wantTop, wantPlan string
	var wantPoints, total, refused int64
	for _, r := range top.Reports {
		if len(r.Spenders) > 0 && r.Spenders[0].Points > wantPoints {
			wantTop, wantPlan, wantPoints = r.Spenders[0].Principal, r.Plan, r.Spenders[0].Points
		}
	}
	for o, n := range stats.Decisions {
		total += n
		if o != "admitted" {
			refused += n
		}
	}
	require.Equal(t, int64(172), total, "the load's decisions, the query and the held login")
	require.Positive(t, refused, "the anonymous client ran out of points")
	require.Equal(t, "free", wantPlan, "the demo key spent most")

	shown := struct{ top, plan, points, total, refused, requested, refusals string }{
		text("top-principal"), text("top-plan"), text("top-points"), text("count-total"),
		text("count-refused"), text("requested-points"), text("refusals"),
	}
	assert.Equal(t, wantTop, shown.top, "the top spender")
	assert.Equal(t, wantPlan, shown.plan, "the top spender's plan")
	assert.Equal(t, strconv.FormatInt(wantPoints, 10), shown.points, "the top spender's points")
	assert.Equal(t, strconv.FormatInt(total, 10), shown.total, "the decisions")
	assert.Equal(t, strconv.FormatInt(refused, 10), shown.refused, "the refusals")
	assert.Equal(t, strconv.FormatInt(stats.Requested, 10), shown.requested, "the requested points")
	for _, r := range stats.Refusals {
		assert.Contains(t, shown.refusals, r.Code, "the refusals table")
		assert.Contains(t, shown.refusals, r.Plan, "the refusals table")
	}

	// Requests in flight per lane: the held login in the authenticated
	// lane, each lane's row as the JSON has it.
	var wantLanes []string
	for _, ln := range stats.InFlight.Lanes {
		wantLanes = append(wantLanes, strings.Join([]string{ln.Lane, ln.Priority, strconv.Itoa(ln.Now), strconv.Itoa(ln.ShedAt)}, "|"))
		if ln.Lane == "authenticated" {
			assert.Equal(t, 1, ln.Now, "the held login in flight")
		}
	}
	require.Len(t, wantLanes, 3, "the example server's lanes")
	shownLanes, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](
		`Array.from(document.querySelectorAll("#lanes tr")).map((tr) => Array.from(tr.cells).map((c) => c.textContent).join("|"))`))
	require.NoError(t, err, "reading the lanes table")
	assert.Equal(t, wantLanes, shownLanes, "the lanes table")
	assert.Equal(t, strconv.Itoa(stats.InFlight.Capacity), text("capacity"), "the capacity")

	// The principal lookup: the top spender's plan and its timeline, one
	// bar a decision at its net points, the query's admission charge
	// dashed above its bar.
	var recent struct {
		Plan   string `json:"plan"`
		Recent []struct {
			Kind    string `json:"kind"`
			Charged int64  `json:"charged"`
			Net     int64  `json:"net"`
		} `json:"recent"`
	}
	getJSON("/admin/principals/"+wantTop, &recent)
	require.NoError(t, chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.ID("principal"), wantTop),
		chromedp.Click(chromedp.CSS("#principal-form button")),
		chromedp.WaitVisible(chromedp.ID("principal-result")),
	), "looking the top spender up")
	plan := text("p-plan")
	bars, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll("#timeline-chart rect.decision")).map((r) => r.dataset.net)`))
	require.NoError(t, err, "reading the timeline's bars")
	charges, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("#timeline-chart rect.charge").length`))
	require.NoError(t, err, "counting the timeline's charges")
	assert.Equal(t, recent.Plan, plan, "the looked-up principal's plan")
	var nets []string
	refunded := 0
	for _, e := range recent.Recent {
		nets = append(nets, strconv.FormatInt(e.Net, 10))
		if e.Net < e.Charged {
			refunded++
		}
	}
	assert.Equal(t, nets, bars, "one timeline bar a recent decision, at its net points")
	assert.Equal(t, 1, refunded, "the query was refunded part of its price")
	assert.Equal(t, refunded, charges, "a refunded decision's charge drawn above its bar")

	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	require.NoError(t, err, "the screenshot")
	require.NotEmpty(t, png)
	if os.Getenv(updateScreenshotEnv) == "1" {
		require.NoError(t, os.WriteFile("../../docs/dashboard.png", png, 0o644))
	}

	mu.Lock()
	defer mu.Unlock()
	require.NotEmpty(t, requests, "no request seen: the network listener is off")
	for _, u := range requests {
		assert.True(t, strings.HasPrefix(u, srv.admin+"/"), "a request outside the admin listener: %s", u)
	}
	assert.Empty(t, problems, "the page logged errors or warnings")
}
