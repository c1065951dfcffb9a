package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/costguard/costguard/middleware"
)

// TestClientOpPrices pins the mix's prices: each operation's requested
// and actual cost on a fresh server are its listed price, so the points
// served are what was asked for.
func TestClientOpPrices(t *testing.T) {
	lim, err := middleware.New(middleware.Dependencies{Logger: slog.New(slog.DiscardHandler)}, clientsPolicy())
	if err != nil {
		t.Fatal(err)
	}
	defer lim.Close()
	h := lim.Handler(newGraphQLServer())
	for i, op := range clientOps {
		r := httptest.NewRequest(http.MethodPost, "/graphql", bytes.NewReader(op.body(opID(op, 0, i), i)))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Authorization", "Bearer "+clientsKey)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		var resp struct {
			Errors     []json.RawMessage `json:"errors"`
			Extensions struct {
				Cost middleware.Cost `json:"cost"`
			} `json:"extensions"`
		}
		if err := json.Unmarshal(w.Body.Bytes(), &resp); err != nil || w.Code != http.StatusOK || len(resp.Errors) > 0 {
			t.Fatalf("%s: %d %v: %s", op.name, w.Code, err, w.Body)
		}
		c := resp.Extensions.Cost
		if c.RequestedQueryCost != op.price || c.ActualQueryCost == nil || *c.ActualQueryCost != op.price {
			t.Errorf("%s: requested %d, actual %v; listed at %d", op.name, c.RequestedQueryCost, c.ActualQueryCost, op.price)
		}
	}
}

// TestClientsScenario runs each client kind briefly with a few clients and
// checks that the counts agree with one another; it asserts no rates.
func TestClientsScenario(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the clients scenario")
	}
	spec := clientsSpec{clients: 4, duration: 1500 * time.Millisecond}
	var runs []*clientsRun
	for _, k := range clientKinds() {
		r, err := runClientsOnce(context.Background(), spec, k)
		if err != nil {
			t.Fatalf("%s: %v", k.name, err)
		}
		runs = append(runs, r)
		if r.sent == 0 || r.served == 0 {
			t.Fatalf("%s: sent %d, served %d", k.name, r.sent, r.served)
		}
		if r.served+r.refused+r.abandoned+r.other != r.sent || r.other != 0 || r.abandoned > int64(spec.clients) || r.failed != 0 {
			t.Errorf("%s: sent %d ≠ served %d + refused %d + abandoned %d + other %d (client failures %d: %v)",
				k.name, r.sent, r.served, r.refused, r.abandoned, r.other, r.failed, r.firstErr)
		}
		if r.admitted != r.served {
			t.Errorf("%s: the limiter admitted %d operations, the handler in front of it saw %d served", k.name, r.admitted, r.served)
		}
		if r.points <= 0 || float64(r.points) > r.allowed() {
			t.Errorf("%s: %d points served, %.0f allowed", k.name, r.points, r.allowed())
		}
		// Each operation the clients finished was served at the server,
		// and at most one per client was still there at the end.
		if r.done > r.served || r.served > r.done+int64(spec.clients) {
			t.Errorf("%s: clients saw %d served, the server %d", k.name, r.done, r.served)
		}
		if r.done+r.gaveUp+r.failed > r.issued || r.issued > r.done+r.gaveUp+r.failed+int64(spec.clients) {
			t.Errorf("%s: %d operations started, %d served + %d given up + %d failed", k.name, r.issued, r.done, r.gaveUp, r.failed)
		}
		// The sends the server saw twice are the application's resends
		// (the naive client) or the transport's retries; the application's
		// last resend may have been cut off by the end of the run.
		retries := r.mutationRetries + r.queryRetries
		if k.resend && (retries > r.resent || r.resent > retries+int64(spec.clients)) {
			t.Errorf("%s: %d resends, the server saw %d sends of an id already sent", k.name, r.resent, retries)
		}
	}
	// The pacing transport never sends a mutation twice (none is marked
	// retry-safe), nor a refused operation again before its Retry-After.
	for _, r := range runs[1:] {
		if r.mutationRetries != 0 || r.earlyRetries != 0 {
			t.Errorf("%s: %d mutation retries, %d resends before their Retry-After", r.kind, r.mutationRetries, r.earlyRetries)
		}
	}
	naive := runs[0]
	if naive.kind != naiveClient.name {
		t.Fatalf("the first run is %q, not the naive client", naive.kind)
	}
	// Three times the refill for longer than the burst lasts: the naive
	// client is refused, resends at once, before its Retry-After.
	if naive.refused == 0 || naive.early == 0 || naive.mutationRetries+naive.queryRetries == 0 {
		t.Errorf("naive: refused %d, early %d, retries %d+%d; want all above 0", naive.refused, naive.early, naive.mutationRetries, naive.queryRetries)
	}

	var out bytes.Buffer
	if err := writeClients(&out, spec, runs); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
	var sum clientsSummary
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &sum); err != nil {
		t.Fatalf("last line is not JSON: %v\n%s", err, out.String())
	}
	if sum.Naive == nil || sum.Naive.Sent != naive.sent || sum.Naive.RefusedPct == nil || sum.Naive.GoodputPct == nil {
		t.Errorf("JSON naive figures %+v, want the run's (sent %d)", sum.Naive, naive.sent)
	}
	if len(runs) > 1 && sum.Paced == nil {
		t.Errorf("JSON lacks the paced figures: %s", lines[len(lines)-1])
	}
}

// TestClientsRecorder counts by hand-made requests: an early send, a
// mutation's id sent twice, a send after its Retry-After.
func TestClientsRecorder(t *testing.T) {
	refuse := true
	rec := newClientsRecorder(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if refuse {
			w.Header().Set("Retry-After", "3600")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		w.Write([]byte(`{"data":{}}`))
	}))
	send := func(client, id string) {
		r := httptest.NewRequest(http.MethodPost, "/graphql", strings.NewReader(`{"query":"{x}","variables":{"rid":"`+id+`"}}`))
		r.Header.Set(headerBenchClient, client)
		rec.ServeHTTP(httptest.NewRecorder(), r)
	}
	send("1", "m1-0") // refused for an hour
	refuse = false
	send("1", "m1-0") // early, and a mutation retry
	send("2", "q2-0") // another client: not early
	send("2", "q2-0") // a query retry
	if rec.sent != 4 || rec.refused != 1 || rec.served != 3 || rec.early != 1 || rec.earlyRetries != 1 || rec.mutationRetries != 1 || rec.queryRetries != 1 {
		t.Errorf("sent %d refused %d served %d early %d (retries %d) mutation retries %d query retries %d; want 4 1 3 1 (1) 1 1",
			rec.sent, rec.refused, rec.served, rec.early, rec.earlyRetries, rec.mutationRetries, rec.queryRetries)
	}
	// A Retry-After of 0 runs out at once.
	rec.notBefore["1"] = time.Now().Add(-earlyTolerance)
	send("1", "q1-1")
	if rec.early != 1 {
		t.Errorf("a send after the Retry-After ran out counted early")
	}
}

func TestClientsFlags(t *testing.T) {
	o, err := parseFlags([]string{"-only", "clients"}, new(bytes.Buffer))
	if err != nil || o.clients.duration != clientsDefaultDuration || o.clients.clients != 20 {
		t.Errorf("-only clients: %+v %v; want %v and 20 clients", o.clients, err, clientsDefaultDuration)
	}
	o, err = parseFlags([]string{"-only", "clients", "-duration", "2s", "-clients", "3"}, new(bytes.Buffer))
	if err != nil || o.clients.duration != 2*time.Second || o.clients.clients != 3 {
		t.Errorf("-duration 2s -clients 3: %+v %v", o.clients, err)
	}
	for _, args := range [][]string{
		{"-only", "clients,redis"},
		{"-only", "clients", "-clients", "0"},
		{"-only", "clients", "-duration", "0s"},
		{"-only", "clients", "-duration", "1h"},
	} {
		if _, err := parseFlags(args, new(bytes.Buffer)); err == nil {
			t.Errorf("parseFlags(%q) accepted it", args)
		}
	}
}
