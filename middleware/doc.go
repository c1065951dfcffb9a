// Package middleware puts the engines in front of HTTP handlers: it owns
// each GraphQL operation and REST request from the door to its report,
// prices operations with package complexity, has package budget decide
// what their cost does to the principal's budgets, and renders each
// decision as statuses, rate-limit headers, error bodies and
// extensions.cost, and to observers as Events. At the door it decides
// what the budget cannot: who pays, the body and document bounds, lanes
// and shedding, subscription caps and trusted documents.
//
// # Wiring
//
// Build one Limiter from its Dependencies (the store, observer, logger,
// clock: fixed for its life) and its Policy (plans, keys, caps: plain data
// that Reload swaps whole), both validated at construction, so a bad
// configuration fails at start, never at the 10,000th request; then
// install it:
//
//	lim, err := middleware.New(middleware.Dependencies{Store: store}, middleware.Policy{Plans: plans, AnonymousPlan: "anon", ...})
//	defer lim.Close()
//
//	srv := handler.New(graph.NewExecutableSchema(...))
//	srv.AddTransport(transport.POST{})
//	mux.Handle("/graphql", lim.Handler(srv))  // every operation priced and debited
//	mux.Handle("/api/", lim.REST(apiMux))     // REST routes, same budgets
//
// Handler adds the limiter's extension to srv and wraps srv. The wrapper
// identifies the caller and bounds the body before gqlgen reads it; the
// extension runs after validation and before any resolver. It enforces
// the static caps (depth, breadth, nodes, max cost, aliases, root fields,
// slicing arguments, arguments gqlgen would not coerce), refuses an
// operation that costs more than the principal's whole burst with
// MAX_COST_EXCEEDED, and otherwise takes the cost, at least MinCost, from
// the bucket; when the tokens are not there it answers RATE_LIMITED and
// nothing executes. Every response carries extensions.cost in Shopify's
// shape.
//
// # Nothing is free
//
// Before gqlgen reads a request, the wrapper bounds what it will cost:
// the body (MaxBodyBytes, 413 even when chunked), the request JSON and the
// values of its variables (counted before they are decoded; undeclared
// variables dropped), the document's tokens and selections (one lexer pass,
// before gqlgen parses or validates), and the large bodies decoded at once
// (MaxBodyBytesInFlight). Every request refused before it could be priced
// pays InvalidCost; each __schema or __type selection after an operation's
// first pays IntrospectionCost, so a tool's schema fetch stays affordable.
// Package middleware/querycache bounds gqlgen's document cache by bytes. docs/threat-model.md
// has the measured bounds.
//
// An extension cannot choose the HTTP status, so the wrapper applies
// what the extension decided when gqlgen writes the response (429, 422 or
// 400, 503) with the rate-limit headers. An operation that reaches the
// server without passing the wrapper is refused (COSTGUARD_NOT_INSTALLED).
//
// # Transports
//
// Every transport gqlgen ships is priced the same way. A multipart request
// (uploads) streams to gqlgen: its operations part is screened, the whole
// bounded by MaxUploadBytes. On a WebSocket (both subprotocols) each
// operation is identified (by the upgrade's headers, or the
// connection_init payload's key), priced and debited alone, and refused
// with its own error message; WebsocketInit closes a connection whose
// payload names an unknown key. A subscription pays its price, then each
// event its actual cost before it is sent; SubscriptionOptions caps those
// a principal holds open. docs/gqlgen.md has the wiring.
//
// # Persisted queries and trusted documents
//
// gqlgen's automatic persisted queries work through the limiter: a
// registration is a whole request (screened, priced, paid for), and a
// hash alone is priced as the document it stands for, with its
// variables; an unknown hash pays InvalidCost. PersistedQueryCache puts
// the trusted documents in front of a bounded cache
// (querycache.NewPersisted). Policy.TrustedDocuments loads a manifest
// (package middleware/trusteddocs), compiles its plans at start and at
// every Reload, and in mode enforce runs nothing else
// (DOCUMENT_NOT_TRUSTED, PERSISTED_QUERY_NOT_FOUND); it may lift the
// structural caps for those documents, never their price, the budget,
// MaxBreadth or the variable bounds.
//
// # Asking before spending
//
// A request with "GraphQL-Cost: validate" (HeaderGraphQLCost) is priced and
// answered without running or debiting anything; "GraphQL-Cost: report"
// runs and adds the per-field breakdown of its price (Cost.Fields). A
// resolver serves GitHub's rateLimit field from RateLimitFrom, and when the
// schema's Query has that field (GraphQLOptions.RateLimitField) with a
// Boolean dryRun argument, rateLimit(dryRun: true) makes the operation a
// dry run: priced, nothing debited, no other root field run.
//
// # Identity and plans
//
// One identity, one budget: GraphQL and REST requests of the same principal
// draw from the same bucket. The default Identifier tries, in order: a
// principal the application put in the request context (WithPrincipal), an
// API key (Authorization: Bearer, or X-API-Key) resolved through a KeyLookup,
// then the client IP on the anonymous plan. An API key is never stored or
// logged: bucket keys and log lines carry its SHA-256. An unknown key is
// answered 401, never 429. X-Forwarded-For (or Forwarded) is believed only
// from a peer inside TrustedProxies, so a spoofed header never changes the
// identity.
//
// # Headers
//
// Responses of a limited route whose principal is known carry
// RateLimit-Policy and RateLimit (draft-ietf-httpapi-ratelimit-headers), the
// X-RateLimit-* family, and on 429 and 503 a Retry-After in whole seconds that
// is never earlier than the true wait. The header names are the Header*
// constants.
//
// # Store failures
//
// What happens when the store fails is decided below the middleware, in
// the guard package limiter/stack puts in front of the store
// (limiter/guard): every store call runs under StoreTimeout, behind a
// circuit breaker (Breaker). FailOpen admits through a local in-memory
// bucket per identity, repaid to the store once it answers again;
// FailClosed answers 503 with RATE_LIMITER_UNAVAILABLE. The middleware logs
// a warning at most once a minute per plan. Error text from a store is
// logged, never written to a client.
//
// # Scaling a shared store
//
// OverLimitCache (on by default for a shared store) remembers rejections in
// the process, so a client hammering an exhausted budget is answered
// without a round trip until its Retry-After has passed; it never admits,
// so budgets stay exact. Plan.SplitBudget serves a UX-grade plan from
// local leases of each budget (tuned by Dependencies.SplitBudget), at the price
// of a bounded overshoot within a window; plans without it stay exact.
// See docs/scaling.md.
package middleware
