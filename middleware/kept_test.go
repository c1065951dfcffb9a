package middleware_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/costguard/costguard/identity"
	"github.com/costguard/costguard/internal/kept"
)

// An Identifier that names principals by whatever a client sent hands the
// Limiter a key of any length: past kept.MaxKey bytes it is replaced by
// its prefix and its hash, a fresh string, still one principal's alone.
func TestLongPrincipalKeyIsBounded(t *testing.T) {
	cfg := testConfig(t, newClock())
	cfg.Identifier = identity.IdentifierFunc(func(r *http.Request) (identity.Identity, error) {
		return identity.Identity{Key: r.Header.Get("X-User"), Plan: "free"}, nil
	})
	rec := &recorder{}
	cfg.Observer = rec
	h := graphQLServer(newLimiter(t, cfg), newTestSchema())

	long := "user:" + strings.Repeat("u", 4<<10)
	for _, user := range []string{long + "a", long + "b", "user:short"} {
		query(t, h, query61, http.Header{"X-User": {user}})
	}
	events := rec.take()
	if len(events) != 3 {
		t.Fatalf("%d events", len(events))
	}
	a, b, short := events[0].Key, events[1].Key, events[2].Key
	if len(a) > kept.MaxKey || len(b) > kept.MaxKey || a == b || !strings.HasPrefix(a, "user:uuu") {
		t.Fatalf("keys of %d and %d bytes, equal %v: %.40q", len(a), len(b), a == b, a)
	}
	if short != "user:short" {
		t.Fatalf("a short key became %q", short)
	}
}
