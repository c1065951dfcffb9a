// Package admin serves the admin API of a middleware.Limiter over HTTP
// (per-principal overrides, who spends, what operations cost, and a live
// dashboard of them), for an adopter to mount on its own admin listener
// (never on the public one):
//
//	GET    /admin/principals/{principal}[?plan=free]  the principal's plan, override and budgets
//	                                                  (and its recent decisions, with Config.Timeline)
//	PUT    /admin/principals/{principal}/override     set its override: {"plan": "pro"} or
//	                                                  {"burst": 20000, "rate": 20000, "per": "1h"},
//	                                                  optionally "quota", "concurrency", "until"
//	DELETE /admin/principals/{principal}/override     remove it (204; 404 when there was none)
//	GET    /admin/top[?plan=&window=1m&limit=10]      the top spenders by net points, per plan
//	                                                  (with Config.Spenders; package spenders)
//	GET    /admin/operations[?limit=20]               what each GraphQL operation cost, by name
//	                                                  (with Config.Operations; package opcosts)
//	GET    /admin/stats                               decisions by outcome, refusals by code and plan,
//	                                                  points, breaker, in flight per lane (with Config.Stats)
//	GET    /admin/stats/history                       the same counters' last 15 minutes, one sample
//	                                                  per 10 seconds (with Config.Stats)
//	GET    /admin/list-sizes                          per list field priced at an assumed size, the sizes
//	                                                  it returned and the size to assume (with Config.ListSizes)
//	GET    /admin/ and /admin/assets/…                a live dashboard of the routes above
//
// The dashboard's page and assets are static, embedded in the binary, and
// served without a token (a browser's address bar sends none); the page
// fetches every figure from the routes above, with the token the user
// types into it. Every other route asks for "Authorization: Bearer <token>", checked in constant
// time against the token's SHA-256 (Config.TokenSHA256); a handler
// without a token must be asked for explicitly (Config.NoToken), for a
// listener only the local machine reaches, and answers only requests a
// browser cannot be made to send from another site (LocalOnly). A PUT or
// DELETE, with a token or not, carries "Content-Type: application/json"
// (CodeNotJSON). Answers are JSON; errors are {"error": "..."} (with a
// "code" for those refusals), never echoing the token.
package admin

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/complexity"
	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/middleware"
	"github.com/costguard/costguard/opcosts"
	"github.com/costguard/costguard/override"
	"github.com/costguard/costguard/spenders"
	"github.com/costguard/costguard/timeline"
)

// Principals is what the API needs of a Limiter.
type Principals interface {
	Principal(ctx context.Context, principal, plan string) (middleware.PrincipalState, error)
	SetOverride(ctx context.Context, principal string, o override.Override) error
	DeleteOverride(ctx context.Context, principal string) (bool, error)
}

var _ Principals = (*middleware.Limiter)(nil)

// MaxBodyBytes bounds a PUT body.
const MaxBodyBytes = 16 << 10

// ErrNoToken: New was given neither a token nor NoToken.
var ErrNoToken = errors.New("admin: no token (set Config.TokenSHA256, or NoToken for a loopback-only listener)")

// Config configures the handler.
type Config struct {
	// TokenSHA256 is the SHA-256 of the bearer token, in hex (as
	// `printf %s "$TOKEN" | sha256sum` prints it). Required unless NoToken.
	TokenSHA256 string
	// NoToken serves the API to anyone who reaches it: only for a listener
	// bound to the loopback interface. Such a handler answers only
	// requests for 127.0.0.1, [::1] or localhost from no page or a page
	// of its own origin (LocalOnly), so that a web page in a browser on
	// the machine cannot drive it by rebinding its name to 127.0.0.1.
	// With a token those checks are not made: a page cannot send the
	// token, which a browser never adds by itself, and a listener with a
	// token may be reached by any name.
	NoToken bool
	// Logger receives the store failures answered 503. Default
	// slog.Default().
	Logger *slog.Logger
	// Spenders, when set, serves GET /admin/top from it; feed it the
	// Limiter's decisions (spenders.Tracker.Add). Nil: no such route.
	Spenders *spenders.Tracker
	// SharedSpenders, when set with Spenders, answers /admin/top for every
	// process that publishes there (package spenders/redisspenders), each
	// plan's reports merged by spenders.Merge.
	SharedSpenders SharedSpenders
	// Operations, when set, serves GET /admin/operations from it; feed it
	// the Limiter's GraphQL decisions (opcosts.Tracker.Add).
	Operations *opcosts.Tracker
	// Timeline, when set, adds the principal's recent decisions to GET
	// /admin/principals/{principal} ("recent", oldest first), and names
	// the plan of a user or an API key that has no ?plan= from its latest
	// decision (its PrincipalPlan, else its Plan), also after an override;
	// feed it the Limiter's decisions (timeline.Timeline.Add), with
	// Entry.PrincipalPlan from Event.PrincipalPlan when it differs from
	// Event.Plan, and Entry.Net from Event.Net().
	Timeline *timeline.Timeline
	// Stats, when set, serves GET /admin/stats and GET
	// /admin/stats/history from it; feed it the Limiter's decisions
	// (Stats.Add).
	Stats *Stats
	// ListSizes, when set, serves GET /admin/list-sizes from it: the
	// recorder the Limiter's analyzer was given
	// (complexity.WithListSizeRecorder).
	ListSizes *complexity.ListSizeRecorder
	// SharedListSizes, when set with ListSizes, answers
	// /admin/list-sizes for every process that publishes there.
	SharedListSizes SharedListSizes
	// Clock tells the time of /admin/top's windows and of the timeline.
	// Default limiter.SystemClock.
	Clock limiter.Clock
}

// SharedSpenders is where several processes' top spenders meet.
type SharedSpenders interface {
	// Reports returns every live process's reports of window, all plans.
	Reports(ctx context.Context, now time.Time, window string) ([]spenders.Report, error)
}

// MaxTop is the most spenders /admin/top lists per plan, and operations
// /admin/operations lists.
const MaxTop = 1000

type handler struct {
	p      Principals
	spend  *spenders.Tracker
	shared SharedSpenders
	recent *timeline.Timeline
	ops    *opcosts.Tracker
	stats  *Stats
	sizes  listSizeSources
	clock  limiter.Clock
	log    *slog.Logger
	token  []byte // SHA-256 of the token; nil: none asked
	mux    *http.ServeMux
}

// New returns the API's handler, serving the routes above and 404 for
// anything else.
func New(p Principals, cfg Config) (http.Handler, error) {
	h := &handler{p: p, mux: http.NewServeMux(), log: cfg.Logger, spend: cfg.Spenders, shared: cfg.SharedSpenders, recent: cfg.Timeline, ops: cfg.Operations, stats: cfg.Stats, clock: cfg.Clock,
		sizes: listSizeSources{cfg.ListSizes, cfg.SharedListSizes}}
	if h.log == nil {
		h.log = slog.Default()
	}
	if h.clock == nil {
		h.clock = limiter.SystemClock{}
	}
	switch {
	case cfg.TokenSHA256 != "":
		sum, err := hex.DecodeString(strings.TrimSpace(cfg.TokenSHA256))
		if err != nil || len(sum) != sha256.Size {
			return nil, errors.New("admin: TokenSHA256 is not a SHA-256 in hex (64 hex digits)")
		}
		h.token = sum
	case !cfg.NoToken:
		return nil, ErrNoToken
	}
	h.mux.HandleFunc("GET /admin/principals/{principal}", h.get)
	h.mux.HandleFunc("PUT /admin/principals/{principal}/override", h.put)
	h.mux.HandleFunc("DELETE /admin/principals/{principal}/override", h.delete)
	if h.spend != nil {
		h.mux.HandleFunc("GET /admin/top", h.top)
	}
	if h.ops != nil {
		h.mux.HandleFunc("GET /admin/operations", h.operations)
	}
	if h.stats != nil {
		h.mux.HandleFunc("GET /admin/stats", h.statsReport)
		h.mux.HandleFunc("GET /admin/stats/history", h.statsHistory)
	}
	if h.sizes.local != nil {
		h.mux.HandleFunc("GET /admin/list-sizes", h.listSizes)
	}
	return h, nil
}

// HashToken returns the hex SHA-256 of a token: what Config.TokenSHA256 holds.
func HashToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// ServeHTTP checks, in order: without a token, that a browser could not
// have been sent here by another site (LocalOnly); then serves the
// dashboard's files; then asks for the token; then, for a request other
// than GET or HEAD, for a JSON body's type.
func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h.token == nil && !localRequest(w, r) {
		return
	}
	if serveDashboard(w, r) {
		return
	}
	if !h.authorized(r) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="costguard admin"`)
		writeError(w, http.StatusUnauthorized, "a bearer token is required (Authorization: Bearer <token>)")
		return
	}
	if !jsonBody(w, r) {
		return
	}
	h.mux.ServeHTTP(w, r)
}

// authorized checks the bearer token against its hash in constant time
// (hashing first makes the comparison's length fixed).
func (h *handler) authorized(r *http.Request) bool {
	if h.token == nil {
		return true
	}
	auth := r.Header.Get("Authorization")
	const prefix = "Bearer "
	if len(auth) <= len(prefix) || !strings.EqualFold(auth[:len(prefix)], prefix) {
		return false
	}
	sum := sha256.Sum256([]byte(auth[len(prefix):]))
	return subtle.ConstantTimeCompare(sum[:], h.token) == 1
}

func (h *handler) get(w http.ResponseWriter, r *http.Request) {
	name, plan := r.PathValue("principal"), r.URL.Query().Get("plan")
	var recent []timeline.Entry
	if h.recent != nil {
		if key, err := override.Principal(name); err == nil {
			recent = h.recent.Recent(h.clock.Now(), key)
		}
		if plan == "" && len(recent) > 0 {
			plan = principalPlan(recent[len(recent)-1])
		}
	}
	st, err := h.p.Principal(r.Context(), name, plan)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	if h.recent == nil {
		writeJSON(w, http.StatusOK, st)
		return
	}
	if recent == nil {
		recent = []timeline.Entry{}
	}
	writeJSON(w, http.StatusOK, struct {
		middleware.PrincipalState
		Recent []timeline.Entry `json:"recent"`
	}{st, recent})
}

// principalPlan is the plan the principal was on by its identity when e
// was decided: e.PrincipalPlan when an override was in force, else e.Plan
// unless that names an override's budget (a timeline fed without
// PrincipalPlan), which is no plan of the configuration.
func principalPlan(e timeline.Entry) string {
	switch {
	case e.PrincipalPlan != "":
		return e.PrincipalPlan
	case strings.HasPrefix(e.Plan, budget.OverridePrefix):
		return ""
	default:
		return e.Plan
	}
}

func (h *handler) put(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("the body is larger than %d bytes", MaxBodyBytes))
		return
	case err != nil:
		writeError(w, http.StatusBadRequest, "the body could not be read")
		return
	}
	o, err := override.Parse(body)
	if err == nil {
		err = h.p.SetOverride(r.Context(), r.PathValue("principal"), o)
	}
	if err != nil {
		h.fail(w, r, err)
		return
	}
	key, _ := override.Principal(r.PathValue("principal"))
	writeJSON(w, http.StatusOK, struct {
		Principal string            `json:"principal"`
		Override  override.Override `json:"override"`
	}{key, o})
}

func (h *handler) delete(w http.ResponseWriter, r *http.Request) {
	ok, err := h.p.DeleteOverride(r.Context(), r.PathValue("principal"))
	switch {
	case err != nil:
		h.fail(w, r, err)
	case !ok:
		writeError(w, http.StatusNotFound, "the principal has no override")
	default:
		w.WriteHeader(http.StatusNoContent)
	}
}

// operations answers opcosts.Report: the operations kept by name, most
// requested points first (?limit=, default 20), then the rest as one.
func (h *handler) operations(w http.ResponseWriter, r *http.Request) {
	limit, ok := limitParam(w, r, 20)
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, h.ops.Report(limit))
}

// statsReport answers Stats.Report.
func (h *handler) statsReport(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, h.stats.Report(h.clock.Now()))
}

// statsHistory answers Stats.History: the last 15 minutes of counters.
func (h *handler) statsHistory(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, h.stats.History(h.clock.Now()))
}

// limitParam reads ?limit= (1 to MaxTop, def when absent), answering 400
// when it is not that.
func limitParam(w http.ResponseWriter, r *http.Request, def int) (int, bool) {
	v := r.URL.Query().Get("limit")
	if v == "" {
		return def, true
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > MaxTop {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("limit must be a whole number from 1 to %d", MaxTop))
		return 0, false
	}
	return n, true
}

// top answers {"window", "reports": [spenders.Report…]}: one plan's
// (?plan=) or every plan's that has spent, the biggest spenders first.
func (h *handler) top(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	window := cmp.Or(q.Get("window"), h.spend.Windows()[0])
	limit, ok := limitParam(w, r, 10)
	if !ok {
		return
	}
	if !slices.Contains(h.spend.Windows(), window) {
		_, err := h.spend.Top(time.Time{}, "", window, 1) // its error names the known windows
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	now := h.clock.Now()
	var reports []spenders.Report
	if h.shared != nil {
		all, err := h.shared.Reports(r.Context(), now, window)
		if err != nil {
			h.fail(w, r, err)
			return
		}
		reports = mergeByPlan(all, q.Get("plan"), limit)
	} else {
		plans := h.spend.Plans()
		if p := q.Get("plan"); p != "" {
			plans = []string{p}
		}
		reports = make([]spenders.Report, 0, len(plans))
		for _, p := range plans {
			rep, _ := h.spend.Top(now, p, window, limit) // the window is known
			reports = append(reports, rep)
		}
	}
	writeJSON(w, http.StatusOK, struct {
		Window  string            `json:"window"`
		Reports []spenders.Report `json:"reports"`
	}{window, reports})
}

// mergeByPlan merges the processes' reports of each plan (only plan's
// when it is not ""), plans in order; a plan no process reported answers
// an empty report.
func mergeByPlan(all []spenders.Report, plan string, limit int) []spenders.Report {
	byPlan := map[string][]spenders.Report{}
	for _, rep := range all {
		if plan == "" || rep.Plan == plan {
			byPlan[rep.Plan] = append(byPlan[rep.Plan], rep)
		}
	}
	if plan != "" && len(byPlan) == 0 {
		m := spenders.Merge(limit)
		m.Plan = plan
		return []spenders.Report{m}
	}
	out := make([]spenders.Report, 0, len(byPlan))
	for _, p := range slices.Sorted(maps.Keys(byPlan)) {
		out = append(out, spenders.Merge(limit, byPlan[p]...))
	}
	return out
}

// fail answers err by what it is: the caller's mistake (400, with
// the message, which names only what the caller sent), a full store (409),
// or the store's failure (503, without the message).
func (h *handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, override.ErrInvalid), errors.Is(err, override.ErrInvalidPrincipal),
		errors.Is(err, budget.ErrUnknownPlan), errors.Is(err, budget.ErrInvalidConfig),
		errors.Is(err, middleware.ErrPlanNeeded):
		msg := err.Error()
		if errors.Is(err, middleware.ErrPlanNeeded) {
			msg += " (?plan=<name>)"
		}
		writeError(w, http.StatusBadRequest, msg)
	case errors.Is(err, override.ErrFull):
		writeError(w, http.StatusConflict, err.Error())
	default:
		h.log.WarnContext(r.Context(), "admin: a store failed", "err", err, "method", r.Method)
		writeError(w, http.StatusServiceUnavailable, "the override store or the budget store did not answer; retry")
	}
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, struct {
		Error string `json:"error"`
	}{msg})
}

// writeRefusal is writeError with a stable code beside the message:
// {"error": msg, "code": code}.
func writeRefusal(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, struct {
		Error string `json:"error"`
		Code  string `json:"code"`
	}{msg, code})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // read by people and scripts, never by a browser as HTML
	var b []byte
	if err := enc.Encode(v); err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":"the answer could not be encoded"}`+"\n")
	} else {
		b = buf.Bytes()
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}
