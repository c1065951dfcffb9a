package serve

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/graph"
)

// countingBody is a request body that counts the bytes read from it.
type countingBody struct {
	r io.Reader
	n int64
}

func (c *countingBody) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// BenchmarkShedAtTheDoor is what a 900 KB GraphQL request shed under
// overload costs the example server, in-process, through its handler:
// three of four slots are held, so the anonymous lane and a key's normal
// requests are shed. An anonymous request's lane is known from its
// identity, so it is shed before its body is read (body-B-read/op 0; the
// goal is under 100 µs whatever the body's size). The peer is the same
// request from the demo key: checkout's lane may take it, so it is read
// and parsed, then shed. Each iteration's document differs (gqlgen's
// query cache never answers for it).
//
//	go test ./internal/serve -run '^$' -bench BenchmarkShedAtTheDoor -benchtime 200x
func BenchmarkShedAtTheDoor(b *testing.B) {
	cfg := defaultConfig()
	cfg.Overload.MaxInFlight = 4
	cfg.Challenge.Secret = secret(testSecret)
	hold := newHoldHook()
	h, cleanup, err := newServer(cfg, deps{
		logger:   slog.New(slog.DiscardHandler),
		resolver: graph.NewResolver(graph.WithOnResolve(hold.onResolve)),
	})
	if err != nil {
		b.Fatal(err)
	}
	var holding sync.WaitGroup
	defer func() {
		close(hold.release)
		holding.Wait()
		if err := cleanup(); err != nil {
			b.Error(err)
		}
	}()
	const held = 3
	for range held {
		holding.Go(func() {
			r := httptest.NewRequest(http.MethodPost, "/graphql", strings.NewReader(`{"query":"{ repository(name: \"hello-world\") { name } }"}`))
			r.Header.Set("Content-Type", "application/json")
			r.Header.Set("Authorization", "Bearer "+demoAPIKey)
			h.ServeHTTP(httptest.NewRecorder(), r)
		})
	}
	for range held {
		<-hold.entered
	}

	// A valid document of 900 KB: one string argument, whose first eight
	// characters each iteration rewrites.
	const prefix = `{"query":"{ user(login: \"`
	doc := []byte(prefix + strings.Repeat("x", 900_000) + `\") { login } }"}`)
	run := func(b *testing.B, apiKey string) {
		b.ReportAllocs()
		var read int64
		i := 0
		for b.Loop() {
			i++
			copy(doc[len(prefix):], fmt.Sprintf("%08d", i))
			body := &countingBody{r: bytes.NewReader(doc)}
			r := httptest.NewRequest(http.MethodPost, "/graphql", body)
			r.ContentLength = int64(len(doc))
			r.RemoteAddr = "192.0.2.60:40000"
			r.Header.Set("Content-Type", "application/json")
			if apiKey != "" {
				r.Header.Set("Authorization", "Bearer "+apiKey)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != http.StatusServiceUnavailable || !strings.Contains(w.Body.String(), budget.CodeOverloaded) {
				b.Fatalf("%d %.300s, want 503 OVERLOADED", w.Code, w.Body)
			}
			read += body.n
		}
		b.ReportMetric(float64(read)/float64(b.N), "body-B-read/op")
	}
	b.Run("anonymous", func(b *testing.B) { run(b, "") })
	b.Run("peer=api-key-read-and-parsed", func(b *testing.B) { run(b, demoAPIKey) })
}
