package client

import (
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestOperationKind(t *testing.T) {
	for _, tc := range []struct {
		doc, name string
		want      kind
	}{
		{"{ a }", "", queryKind},
		{"query { a }", "", queryKind},
		{"query Q($v: In = {x: {y: 1}}) @dir(a: [1, {b: 2}]) { a { b } }", "Q", queryKind},
		{"mutation M { m }", "", mutationKind},
		{"subscription S { s }", "S", subscriptionKind},
		{"query Q { a } mutation M { m }", "M", mutationKind},
		{"query Q { a } mutation M { m }", "Q", queryKind},
		{"query Q { a } mutation M { m }", "", unknownKind}, // ambiguous
		{"query Q { a }", "Other", unknownKind},
		{"fragment F on query { a } mutation M { ...F }", "", mutationKind},
		{"# query Q { a }\nmutation M { m }", "", mutationKind},
		{`mutation M { m(s: "} query Q {", b: """ } { """) }`, "", mutationKind},
		{`mutation M { m(s: """ \""" query { """) }`, "", mutationKind},
		{"query query { a }", "query", queryKind},
		{"query mutation { a }", "mutation", queryKind},
		{"", "", unknownKind},
		{"not graphql at all", "", unknownKind},
		{"mutation M { m", "", mutationKind},
		{`"unterminated`, "", unknownKind},
	} {
		if got, _ := operationKind(tc.doc, tc.name); got != tc.want {
			t.Errorf("operationKind(%q, %q) = %d, want %d", tc.doc, tc.name, got, tc.want)
		}
	}
}

func TestReadOperation(t *testing.T) {
	post := gqlRequest(t, queryDoc, "Repos")
	op := readOperation(post)
	if op.kind != queryKind || op.name != "Repos" || !op.rereadable || op.idempotent || !strings.HasPrefix(op.key, "Repos\x00") {
		t.Errorf("POST: %+v", op)
	}
	if b, _ := post.GetBody(); b == nil {
		t.Fatal("no body")
	}
	anon := readOperation(gqlRequest(t, "{ a }", ""))
	if anon.kind != queryKind || !strings.HasPrefix(anon.name, "sha256:") || anon.key == readOperation(gqlRequest(t, "{ b }", "")).key {
		t.Errorf("anonymous: %+v", anon)
	}
	get, _ := http.NewRequest("GET", "http://api.test/graphql?"+url.Values{"query": {mutationDoc}}.Encode(), nil)
	if op := readOperation(get); op.kind != mutationKind || op.name != "Open" || !op.rereadable {
		t.Errorf("GET: %+v", op)
	}
	apq, _ := http.NewRequest("GET", "http://api.test/graphql?"+url.Values{"extensions": {`{"persistedQuery":{"sha256Hash":"abc"}}`}}.Encode(), nil)
	if op := readOperation(apq); op.kind != queryKind || op.key != "\x00abc" {
		t.Errorf("persisted GET: %+v", op)
	}
	rest, _ := http.NewRequest("POST", "http://api.test/api/login", strings.NewReader("{}"))
	if op := readOperation(rest); op.kind != unknownKind || op.idempotent || op.key != "POST /api/login" {
		t.Errorf("REST: %+v", op)
	}
	big := gqlRequest(t, strings.Repeat(" ", maxBodyBytes)+queryDoc, "Repos")
	if op := readOperation(big); op.kind != unknownKind {
		t.Errorf("a body past maxBodyBytes is read: %+v", op)
	}
}

func TestParseItems(t *testing.T) {
	got := parseItems([]string{`"free";q=5000;w=3600, "POST /api/login";q=5;w=900`, `tok;r=3;t=4, "a\"b,c";q=1`, `;q=1, "open;q=2`})
	want := []policyItem{
		{name: "free", q: 5000, w: 3600, r: -1, t: -1},
		{name: "POST /api/login", q: 5, w: 900, r: -1, t: -1},
		{name: "tok", q: -1, w: -1, r: 3, t: 4},
		{name: `a"b,c`, q: 1, w: -1, r: -1, t: -1},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("parseItems = %+v\nwant %+v", got, want)
	}
}

func TestReadHeaders(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	h := http.Header{}
	h.Set("Retry-After", now.Add(90*time.Second).UTC().Format(http.TimeFormat))
	h.Set("X-RateLimit-Reset", "1800000080")
	s := readHeaders(h, now)
	if s.retryAfter != 90*time.Second || !s.reset.Equal(now.Add(80*time.Second)) || s.limit != -1 || s.remaining != -1 {
		t.Errorf("readHeaders = %+v", s)
	}
}

// The pacing rate halves on a low answer once per round trip, and grows
// back while the bucket is above half.
func TestPacerAIMD(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	var p pacer
	answer := func(at time.Time, sentAt time.Time, remaining int64) {
		s := signals{policies: []policyItem{{name: "p", q: 100, w: 10}}, limit: -1, remaining: remaining, price: 10}
		p.observe(at, sentAt, 10, &s)
	}
	answer(now, now, 90) // 10 points spent of 100 refilling at 10 per second: alone
	if !p.known || p.rate != 10 || p.share != 10 {
		t.Fatalf("after the first answer: known %v, rate %g, share %g; want 10 and 10", p.known, p.rate, p.share)
	}
	now = now.Add(time.Second)
	// Low, and others spent 80 points while this one spent 10: at most
	// half, and at most its part of the drain (10 of 90) of the refill.
	answer(now, now.Add(-time.Millisecond), 10)
	if want := 10.0 * 10 / 90; p.share > want+1e-9 {
		t.Fatalf("share %g after a low answer, want %g", p.share, want)
	}
	cut := p.share
	answer(now.Add(time.Millisecond), now.Add(-time.Millisecond), 5) // sent before the cut
	if p.share != cut {
		t.Errorf("share %g after an answer to a request sent before the cut, want %g still", p.share, cut)
	}
	answer(now.Add(2*time.Millisecond), now.Add(time.Millisecond), 5) // sent after it
	if p.share > cut/2 {
		t.Errorf("share %g after the next round trip's low answer, want at most %g", p.share, cut/2)
	}
	before := p.share
	now = now.Add(time.Second)
	answer(now, now, 80) // above half: grow by the rate over two fill times
	if want := min(before+10*1.0/20, 10); p.share < before || p.share > want+1e-9 {
		t.Errorf("share %g after a second above half, want between %g and %g", p.share, before, want)
	}
}

// A request that fits waits for nothing; one that does not waits for the
// bucket to hold it; one that never fits is sent at once.
func TestPacerDelay(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	var p pacer
	s := signals{policies: []policyItem{{name: "p", q: 100, w: 100}}, limit: -1, remaining: 100}
	p.observe(now, now, 1, &s)
	if d := p.delay(now, 40); d != 0 {
		t.Errorf("40 of 100 points: delay %s, want 0", d)
	}
	s.remaining = 5
	p.observe(now, now, 1, &s)
	if d := p.delay(now, 20); d < 15*time.Second {
		t.Errorf("20 points with 5 left at 1 point/s: delay %s, want at least 15s", d)
	}
	if d := p.delay(now, 101); d != 0 {
		t.Errorf("more than the limit: delay %s, want 0", d)
	}
	p.hold = now.Add(time.Minute)
	if d := p.delay(now, 1); d != time.Minute {
		t.Errorf("held for a minute: delay %s", d)
	}
}
