//go:build !race

package middleware_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/99designs/gqlgen/client"
)

// This file runs without the race detector only (.ci/run runs it so):
// gqlgen's MultipartMixed transport (v0.17.92) marshals a subscription's
// event on a goroutine of its own while the executor already writes the
// next event into the buffer that event's data points into, which -race
// reports inside gqlgen, whatever wraps it.

// Over multipart/mixed too, a subscription pays to subscribe and each
// event pays its own actual cost; its slot is given back when the client
// leaves. gqlgen writes nothing until the first event, so the request runs
// in the background while the events are made.
func TestMultipartMixedSubscriptionEventsPay(t *testing.T) {
	a := newAdopter(t, config{}, nil)
	price := a.price(subscribeDoc)
	before := a.remaining("")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req := a.subscribeRequest(ctx, "multipart/mixed")
	type answer struct {
		resp *http.Response
		err  error
	}
	answered := make(chan answer, 1)
	go func() {
		resp, err := a.srv.Client().Do(req)
		answered <- answer{resp, err}
	}()
	waitFor(t, func() bool { return a.res.Subscribers() == 1 })
	if n := a.lim.OpenSubscriptions(); n != 1 {
		t.Fatalf("%d subscriptions open, want 1", n)
	}
	if got := a.remaining(""); got != before-price {
		t.Fatalf("after subscribing %d, want %d", got, before-price)
	}
	const events = 3
	for range events {
		var out map[string]any
		if err := client.New(a.h).Post(mutationDoc, &out, client.AddHeader("Authorization", "Bearer "+adopterKey)); err != nil {
			t.Fatal(err)
		}
	}
	ans := <-answered
	if ans.err != nil {
		t.Fatal(ans.err)
	}
	defer ans.resp.Body.Close()
	var body strings.Builder
	buf := make([]byte, 4096)
	for strings.Count(body.String(), `"issueCreated"`) < events { // each event's part, with its cost
		n, err := ans.resp.Body.Read(buf)
		body.Write(buf[:n])
		if err != nil {
			t.Fatalf("reading the parts: %v\n%s", err, body.String())
		}
	}
	if got := strings.Count(body.String(), `"actualQueryCost":1`); got != events {
		t.Errorf("%d events report actual cost 1, want %d:\n%s", got, events, body.String())
	}
	if got, want := a.remaining(""), before-price-events; got != want {
		t.Errorf("after %d events %d left, want %d", events, got, want)
	}
	cancel()
	waitFor(t, func() bool { return a.lim.OpenSubscriptions() == 0 })
}

// A subscription over multipart/mixed is its subscribe's decision,
// reported when it is admitted, then one decision per event
// (TestOneDecisionPerOperation counts the other operations).
func TestMultipartMixedSubscriptionDecisions(t *testing.T) {
	checkDecisions(t, multipartMixed, nil, func(dc decisionCase) bool { return dc.subscription })
}
