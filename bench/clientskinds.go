package main

import (
	"net/http"

	"github.com/costguard/costguard/client"
)

// pacedClient is the pacing transport of package client over each
// client's own plain http.Transport, one Transport per client (as one per
// process sharing the key), told each operation's price (client.WithPrice).
// No mutation is marked retry-safe; the application resends nothing.
var pacedClient = clientKind{
	name: pacedName,
	transport: func(base http.RoundTripper) http.RoundTripper {
		return &client.Transport{Base: base}
	},
	prepare: func(r *http.Request, op clientOp) *http.Request {
		return r.WithContext(client.WithPrice(r.Context(), op.price))
	},
}

// clientKinds are the clients the clients scenario runs, in order.
func clientKinds() []clientKind {
	return []clientKind{naiveClient, pacedClient}
}
