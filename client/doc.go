// Package client paces a program's GraphQL and REST requests on the budget
// a costguard server reports, so that they wait for room instead of being
// refused.
//
// The rule: a request goes out at once while the plan's bucket, projected
// from the last answer at the refill rate the other clients of the key
// leave (the refill rate less their drain, measured from how the reported
// remaining moved against what this Transport spent), holds its price and
// half the limit besides, or would be full; below that, each Transport
// spaces its requests at its own rate and sends one when the bucket
// projected at that rate holds its price, or would be full. The rate is
// halved (once per round trip, and to no more than the Transport's part of
// the drain times the refill rate) when an answer reports less than a
// quarter of the limit (or than twice the price) or a refusal, and grows
// by the refill rate over twice the bucket's fill time while the bucket is
// above half, so that clients sharing a key settle on shares that keep the
// bucket neither full (refill lost) nor empty (requests refused). Every
// wait is lengthened by up to a fifth of itself at random, so that
// clients do not send at the same instant.
//
// # Use
//
// A Transport is an http.RoundTripper; its zero value is ready:
//
//	t := &client.Transport{}
//	c := &http.Client{Transport: t}
//	resp, err := c.Post(url, "application/json", strings.NewReader(body))
//
// Give each API key its own Transport: one Transport keeps one view of
// one budget.
//
// # What it reads
//
// From every answer: RateLimit-Policy (`"free";q=5000;w=3600`: the first
// item is the plan's bucket, paced on; the others are kept for View),
// RateLimit (`"free";r=4890;t=80`), X-RateLimit-Limit, -Remaining and
// -Reset, Retry-After (seconds or an HTTP date), and from a JSON body of at
// most 1 MiB (application/json or application/graphql-response+json)
// extensions.cost (requestedQueryCost, throttleStatus with
// maximumAvailable, currentlyAvailable and restoreRate), the first
// error's extensions.code, cost and retryAfterSeconds, and the REST
// refusal's error and retry_after_seconds. The body is buffered and put
// back, so the caller reads it whole; a longer body, or one of another
// type, is passed through unread. What is malformed is ignored.
//
// # Prices
//
// An operation's price is the requestedQueryCost the server last gave the
// same operation (its name and the SHA-256 of its document, for the last
// 1000 operations), or the one the caller gives with WithPrice, which
// comes first. An operation of unknown price is paced as if it cost one
// point; one that costs more than the bucket ever holds is sent at once,
// for the server to refuse.
//
// # Refusals
//
// A refusal is a 429 or a 503, or a body whose error code says "not now"
// (RATE_LIMITED, QUOTA_EXCEEDED, CONCURRENCY_LIMITED, OVERLOADED, ...)
// under any status. The Transport waits the server's Retry-After (or
// retryAfterSeconds) lengthened by up to a fifth, never less, then sends
// the request again, when it is a query (a GET, HEAD or OPTIONS outside
// GraphQL), or a mutation the caller marked with WithRetrySafe, and its
// body can be read again (http.NewRequest sets GetBody for the usual
// readers). MAX_COST_EXCEEDED, which no wait cures, is never retried, nor
// is the bucket's RATE_LIMITED of an operation priced above the plan's
// limit (a drained bucket cannot pay even the refusal's InvalidCost, so
// the server says "not now" for it), nor a refusal without a wait. Retries are bounded
// per request (MaxRetries, 3) and across requests (RetryBudget, a tenth of
// them), and every wait by MaxWait (30 seconds in all per request) and the
// request's context. The caller gets the last answer. A refusal that
// applies to every request (OVERLOADED, QUOTA_EXCEEDED,
// CONCURRENCY_LIMITED, RATE_LIMITER_UNAVAILABLE, or a 429 or 503 without a
// code) holds every request of the Transport until its Retry-After runs
// out; one that would wait past MaxWait fails with ErrRetryAfter, unsent.
// The others (RATE_LIMITED, about one price, with the bucket in the view; a
// route's or a field's limit) hold only the refused request.
//
// # View
//
// View returns what the Transport knows, for logs and dashboards: each
// policy's limit, remaining points and reset time, the last price of
// each operation, and the rate it paces at.
package client
