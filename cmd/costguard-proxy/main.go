// Command costguard-proxy puts costguard's per-client cost budgets in front
// of any GraphQL server, in any language: each operation is priced from the
// upstream's schema, debited from its client's budget, refused before it
// reaches the upstream when the budget cannot pay, forwarded otherwise, and
// settled on the actual cost the upstream's response shows.
//
//	costguard-proxy -upstream http://localhost:4000/graphql -schema schema.graphql
//	costguard-proxy -upstream http://localhost:4000/graphql -introspect -config costguard.yaml
//	costguard-proxy -upstream http://localhost:4000/graphql -schema schema.graphql -redis localhost:6379
//
// The proxy serves GraphQL on /graphql (POST, GET, batched POST, SSE, and
// WebSocket with both subprotocols) and takes every flag and configuration
// key of the example server (docs/server.md) but its demo ones; the admin
// listener serves the same probes, metrics, admin API and dashboard.
// SIGHUP re-reads -config and the schema (the -schema file, or the
// upstream's introspection). docs/proxy.md describes what it forwards, what
// it adds and how it answers.
//
// The operations go through the same lifecycle as a gqlgen server behind
// lim.Handler, because they are one: the proxy runs gqlgen over a schema
// whose resolvers are the upstream (package upstream). Its own code is the
// forwarding, the batches and the flags.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/99designs/gqlgen/graphql"

	"github.com/costguard/costguard/cmd/costguard-proxy/internal/upstream"
	"github.com/costguard/costguard/internal/serve"
	"github.com/costguard/costguard/middleware"
)

func main() { serve.Main(options(&proxyFlags{})) }

// proxyFlags are the proxy's own flags, beside the example server's.
type proxyFlags struct {
	upstream, upstreamWS string
	schemaFile           string
	introspect           bool
	forwardHeaders       string
	secretFile           string
	maxBatch             int
	maxBatchBytes        int64
	maxResponseBytes     int64
	timeout              time.Duration

	secret []byte // read from secretFile
}

// options is what sets the proxy apart from the example server.
func options(pf *proxyFlags) serve.Options {
	return serve.Options{
		Program: "costguard-proxy",
		Banner:  "costguard-proxy",
		NoDemo:  true,
		Flags:   pf.register,
		Schema:  pf.schema,
		WrapGraphQL: func(h http.Handler, lim *middleware.Limiter) http.Handler {
			return newBatching(upstream.Capture(h), lim, pf.maxBatch, pf.maxBatchBytes)
		},
		POST: upstream.POST{}, // the upstream's data written as it came, not encoded again
	}
}

// defaultMaxBatchBytes is -max-batch-bytes's default. A batch body is
// read whole before its operations reach the limiter, which bounds each
// again by max_body_bytes: by default no more is read ahead of the
// limiter than the bodies it leaves out of max_body_bytes_in_flight
// (64 KiB and less).
const defaultMaxBatchBytes = 64 << 10

// register adds the proxy's flags to fs and returns their check.
func (pf *proxyFlags) register(fs *flag.FlagSet) func() error {
	fs.StringVar(&pf.upstream, "upstream", "", "the upstream GraphQL server's `URL` (http:// or https://), where operations are forwarded (required)")
	fs.StringVar(&pf.upstreamWS, "upstream-ws", "", "the upstream's WebSocket `URL` for subscriptions (graphql-transport-ws); default: -upstream with ws:// or wss://")
	fs.StringVar(&pf.schemaFile, "schema", "", "price operations by the SDL in this `file` (with the upstream's @cost and @listSize); excludes -introspect")
	fs.BoolVar(&pf.introspect, "introspect", false, "fetch the schema from the upstream's introspection at start and on SIGHUP (no @cost or @listSize: introspection does not carry them)")
	fs.StringVar(&pf.forwardHeaders, "forward-headers", strings.Join(upstream.DefaultForwardHeaders(), ","),
		"comma-separated client request `headers` forwarded to the upstream (\"\": none); the proxy's own X-Costguard-* headers are always its own")
	fs.StringVar(&pf.secretFile, "principal-secret-file", "", "sign the "+HeaderPrincipal+" and "+HeaderPlan+" headers sent upstream with the secret in this `file` ("+HeaderSignature+", docs/proxy.md)")
	fs.IntVar(&pf.maxBatch, "max-batch", DefaultMaxBatch, "the most `operations` one batched POST may hold, each priced and charged as a lone POST")
	fs.Int64Var(&pf.maxBatchBytes, "max-batch-bytes", defaultMaxBatchBytes, "the largest batched POST body read, in `bytes`; a larger one goes to the limiter as a lone POST (and is refused past max_body_bytes)")
	fs.Int64Var(&pf.maxResponseBytes, "max-response-bytes", upstream.DefaultMaxResponseBytes, "the largest upstream response or subscription event read, in `bytes`; larger ones answer 502")
	fs.DurationVar(&pf.timeout, "upstream-timeout", upstream.DefaultTimeout, "how long a query or mutation may take upstream, answer included")
	return pf.check
}

// check validates the flags once they are parsed.
func (pf *proxyFlags) check() error {
	switch {
	case pf.upstream == "":
		return errors.New("-upstream is required: the URL of the GraphQL server to forward to")
	case pf.schemaFile == "" && !pf.introspect:
		return errors.New("give -schema FILE (the upstream's SDL, with its @cost and @listSize) or -introspect")
	case pf.schemaFile != "" && pf.introspect:
		return errors.New("-schema and -introspect exclude each other")
	case pf.maxBatch < 1:
		return fmt.Errorf("-max-batch %d: it must be at least 1", pf.maxBatch)
	case pf.maxBatchBytes < 1:
		return fmt.Errorf("-max-batch-bytes %d: it must be positive", pf.maxBatchBytes)
	case pf.maxResponseBytes < 1:
		return fmt.Errorf("-max-response-bytes %d: it must be positive", pf.maxResponseBytes)
	case pf.timeout <= 0:
		return fmt.Errorf("-upstream-timeout %v: it must be positive", pf.timeout)
	}
	if u, err := url.Parse(pf.upstream); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("-upstream %q: want an http:// or https:// URL", pf.upstream)
	}
	for _, h := range strings.Split(pf.forwardHeaders, ",") {
		if strings.HasPrefix(strings.ToLower(strings.TrimSpace(h)), "x-costguard-") {
			return fmt.Errorf("-forward-headers names %s: the X-Costguard-* headers the upstream gets are the proxy's own, never a client's", strings.TrimSpace(h))
		}
	}
	if pf.secretFile != "" {
		b, err := os.ReadFile(pf.secretFile)
		if err != nil {
			return fmt.Errorf("-principal-secret-file: %w", err)
		}
		if pf.secret = []byte(strings.TrimRight(string(b), " \t\r\n")); len(pf.secret) < 16 {
			return fmt.Errorf("-principal-secret-file %s: the secret must be at least 16 bytes", pf.secretFile)
		}
	}
	return nil
}

// schema builds the forwarding schema: the SDL from -schema or from the
// upstream's introspection, and the forwarder to -upstream.
func (pf *proxyFlags) schema(ctx context.Context, log *slog.Logger) (graphql.ExecutableSchema, error) {
	client := upstream.NewClient(pf.timeout)
	var sdl string
	if pf.introspect {
		var err error
		if sdl, err = upstream.Introspect(ctx, client, pf.upstream, nil); err != nil {
			return nil, err
		}
		log.Info("costguard-proxy: schema from the upstream's introspection", "upstream", pf.upstream)
	} else {
		b, err := os.ReadFile(pf.schemaFile)
		if err != nil {
			return nil, fmt.Errorf("-schema: %w", err)
		}
		sdl = string(b)
	}
	s, err := upstream.LoadSDL(sdl)
	if err != nil {
		return nil, fmt.Errorf("the upstream's schema: %w", err)
	}
	var forward []string
	if pf.forwardHeaders != "" {
		for _, h := range strings.Split(pf.forwardHeaders, ",") {
			if h = strings.TrimSpace(h); h != "" {
				forward = append(forward, h)
			}
		}
	}
	if forward == nil {
		forward = []string{} // none, not the default
	}
	fwd, err := upstream.New(upstream.Config{
		Schema:           s,
		URL:              pf.upstream,
		WebSocketURL:     pf.upstreamWS,
		Client:           client,
		MaxResponseBytes: pf.maxResponseBytes,
		ForwardHeaders:   forward,
		Headers:          principalHeaders(pf.secret, time.Now),
	})
	if err != nil {
		return nil, err
	}
	return fwd.ExecutableSchema(), nil
}
