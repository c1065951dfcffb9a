package serve

import (
	"context"
	cryptorand "crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strconv"

	"github.com/99designs/gqlgen/graphql/playground"

	"github.com/costguard/costguard/graph"
	"github.com/costguard/costguard/graph/model"
	"github.com/costguard/costguard/middleware"
	"github.com/costguard/costguard/overload"
)

// The demo parts: the GraphiQL page and the REST routes, which serve the
// demo schema's data (Options.NoDemo leaves them out).

// searchResults is how many hits GET /api/search returns at most.
const searchResults = 20

// featureSearch names GET /api/search in the degradation list: while it is
// switched off the route answers 503 {"error":"degraded"}.
const featureSearch = "search"

type errorBody struct {
	Error string `json:"error"`
}

// degradedBody answers a route whose feature is switched off under load.
type degradedBody struct {
	Error             string `json:"error"`
	RetryAfterSeconds int64  `json:"retry_after_seconds"`
}

// userBody is GET /api/users/{login}'s answer.
type userBody struct {
	Login string   `json:"login"`
	Name  *string  `json:"name"`
	Repos []string `json:"repos"`
}

// mountDemo adds the demo parts to mux: the GraphiQL page on / and the
// REST demo routes under /api/, behind the limiter.
func (s *server) mountDemo(mux *http.ServeMux) {
	rest := &restAPI{res: s.res, log: s.log, prog: s.prog, retryAfter: func() int64 {
		return overload.RetryAfter(overload.DefaultRetryAfterMax, rand.Float64)
	}}
	api := http.NewServeMux()
	api.HandleFunc("GET /api/users/{login}", rest.getUser)
	api.HandleFunc("GET /api/search", rest.search)
	api.HandleFunc("POST /api/login", rest.login)
	api.HandleFunc("/api/", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusNotFound, errorBody{Error: "not_found"})
	})
	mux.Handle("GET /{$}", playground.Handler("costguard example", "/graphql"))
	mux.Handle("/api/", s.lim.REST(api)) // both wrappers bound the body (max_body_bytes)
}

// restAPI serves the REST demo routes from the data GraphQL serves, through
// the same resolvers.
type restAPI struct {
	res  *graph.Resolver
	log  *slog.Logger
	prog string // opens the log lines
	// retryAfter is the Retry-After, in seconds, of a degraded answer.
	retryAfter func() int64
}

// getUser serves GET /api/users/{login}.
func (a *restAPI) getUser(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	u, err := a.res.Query().User(ctx, r.PathValue("login"))
	if err != nil {
		a.internalError(ctx, w, err)
		return
	}
	if u == nil {
		writeJSON(w, http.StatusNotFound, errorBody{Error: "not_found"})
		return
	}
	repos, err := a.res.User().Repos(ctx, u, nil, nil)
	if err != nil {
		a.internalError(ctx, w, err)
		return
	}
	body := userBody{Login: u.Login, Name: u.Name, Repos: make([]string, 0, len(repos))}
	for _, repo := range repos {
		body.Repos = append(body.Repos, repo.Name)
	}
	writeJSON(w, http.StatusOK, body)
}

// searchHit is one result of GET /api/search; Type tells which fields are
// set.
type searchHit struct {
	Type  string  `json:"type"`
	Login string  `json:"login,omitempty"`
	Name  *string `json:"name,omitempty"`
	Owner string  `json:"owner,omitempty"`
	ID    string  `json:"id,omitempty"`
	Title string  `json:"title,omitempty"`
}

// search serves GET /api/search?q=: the GraphQL search field over REST,
// at most searchResults hits.
func (a *restAPI) search(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	if overload.Degraded(ctx, featureSearch) {
		ra := a.retryAfter()
		w.Header().Set(middleware.HeaderRetryAfter, strconv.FormatInt(ra, 10))
		writeJSON(w, http.StatusServiceUnavailable, degradedBody{Error: "degraded", RetryAfterSeconds: ra})
		return
	}
	q := r.URL.Query().Get("q")
	if q == "" {
		writeJSON(w, http.StatusBadRequest, errorBody{Error: "missing_query"})
		return
	}
	first := searchResults
	found, err := a.res.Query().Search(ctx, q, &first)
	if err != nil {
		a.internalError(ctx, w, err)
		return
	}
	hits := make([]searchHit, 0, len(found))
	for _, f := range found {
		switch v := f.(type) {
		case *model.User:
			hits = append(hits, searchHit{Type: "User", Login: v.Login, Name: v.Name})
		case *model.Repository:
			name := v.Name
			hits = append(hits, searchHit{Type: "Repository", Name: &name, Owner: v.OwnerLogin})
		case *model.Issue:
			hits = append(hits, searchHit{Type: "Issue", ID: v.ID, Title: v.Title})
		}
	}
	writeJSON(w, http.StatusOK, struct {
		Results []searchHit `json:"results"`
	}{hits})
}

// The demo credentials POST /api/login accepts.
const (
	demoLogin    = "alice"
	demoPassword = "correct horse battery staple"
)

// loginBody is what POST /api/login reads.
type loginBody struct {
	Login    string `json:"login"`
	Password string `json:"password"`
}

// login serves POST /api/login, a stand-in for a password check: the demo
// credentials get a fresh random token, anything else 401. It is what a
// password guesser hammers, so the default configuration gives it a route
// limit of its own (rest.route_limits).
func (a *restAPI) login(w http.ResponseWriter, r *http.Request) {
	var body loginBody
	if err := json.NewDecoder(io.LimitReader(r.Body, 4<<10)).Decode(&body); err != nil {
		writeJSON(w, http.StatusBadRequest, errorBody{Error: "bad_request"})
		return
	}
	if subtle.ConstantTimeCompare([]byte(body.Login), []byte(demoLogin))&subtle.ConstantTimeCompare([]byte(body.Password), []byte(demoPassword)) != 1 {
		writeJSON(w, http.StatusUnauthorized, errorBody{Error: "invalid_credentials"})
		return
	}
	var token [16]byte
	_, _ = cryptorand.Read(token[:]) // never fails on a supported platform
	writeJSON(w, http.StatusOK, struct {
		Login string `json:"login"`
		Token string `json:"token"`
	}{body.Login, hex.EncodeToString(token[:])})
}

// internalError logs err and answers 500 without its text: error strings
// are for operators, not clients.
func (a *restAPI) internalError(ctx context.Context, w http.ResponseWriter, err error) {
	a.log.ErrorContext(ctx, a.prog+": request failed", "err", err)
	writeJSON(w, http.StatusInternalServerError, errorBody{Error: "internal"})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		// Only the fixed types above are marshalled; they always encode.
		panic(fmt.Sprintf("server: encoding %T: %v", v, err))
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}
