package admin_test

import (
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/middleware"
	"github.com/costguard/costguard/middleware/admin"
)

// The admin API on a listener of its own: set a principal's override, read
// it back with the budgets in force.
func ExampleNew() {
	lim, err := middleware.New(middleware.Dependencies{}, middleware.Policy{
		Plans: map[string]budget.Plan{
			"free": {Burst: 100, Rate: 100, Per: time.Hour},
			"pro":  {Burst: 10000, Rate: 10000, Per: time.Hour},
		},
		AnonymousPlan: "free",
	})
	if err != nil {
		log.Fatal(err)
	}
	defer lim.Close()
	const token = "a-long-random-admin-token"
	api, err := admin.New(lim, admin.Config{TokenSHA256: admin.HashToken(token)})
	if err != nil {
		log.Fatal(err)
	}
	adminMux := http.NewServeMux()
	adminMux.Handle("/admin/", api)
	srv := httptest.NewServer(adminMux) // in production: an admin listener, never the public one
	defer srv.Close()

	send := func(method, path, body string) {
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		fmt.Print(resp.StatusCode, " ", string(b))
	}
	send(http.MethodPut, "/admin/principals/alice/override", `{"plan": "pro"}`)
	send(http.MethodGet, "/admin/principals/alice", "")
	send(http.MethodPut, "/admin/principals/alice/override", `{"plan": "gold"}`)
	// Output:
	// 200 {"principal":"user:alice","override":{"plan":"pro"}}
	// 200 {"principal":"user:alice","plan":"pro","override":{"plan":"pro"},"policies":[{"name":"pro","limit":10000,"remaining":10000,"reset_seconds":0}]}
	// 400 {"error":"budget: no such plan \"gold\" (the plans are \"free\", \"pro\")"}
}
