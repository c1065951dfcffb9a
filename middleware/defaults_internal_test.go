package middleware

import (
	"reflect"
	"testing"
	"time"

	"github.com/costguard/costguard/budget"
)

// Defaults are what New makes of zero fields: given to New, they build the
// Limiter that zero fields build.
func TestDefaultsAreNewsDefaults(t *testing.T) {
	plans := map[string]budget.Plan{"free": {Burst: 100, Rate: 100, Per: time.Minute}}
	zero, err := New(Dependencies{}, Policy{Plans: plans, AnonymousPlan: "free"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { zero.Close() })
	deps, policy := Defaults()
	policy.Plans, policy.AnonymousPlan = plans, "free"
	filled, err := New(deps, policy)
	if err != nil {
		t.Fatalf("New refuses Defaults: %v", err)
	}
	t.Cleanup(func() { filled.Close() })

	if zero.maxBody != filled.maxBody || zero.maxUpload != filled.maxUpload {
		t.Errorf("body bounds: zero fields %d, %d; Defaults %d, %d", zero.maxBody, zero.maxUpload, filled.maxBody, filled.maxUpload)
	}
	z, f := zero.settings.Load(), filled.settings.Load()
	if z.gql != f.gql {
		t.Errorf("GraphQL options:\nzero fields %+v\nDefaults    %+v", z.gql, f.gql)
	}
	if z.restCost != f.restCost || z.maxSubscriptions != f.maxSubscriptions {
		t.Errorf("REST cost, subscriptions: zero fields %d, %d; Defaults %d, %d", z.restCost, z.maxSubscriptions, f.restCost, f.maxSubscriptions)
	}
	if !reflect.DeepEqual(z.pol, f.pol) {
		t.Errorf("budget policy:\nzero fields %+v\nDefaults    %+v", z.pol, f.pol)
	}
	// What the reference documents (docs/middleware.md).
	if deps.MaxBodyBytes != 1<<20 || deps.MaxUploadBytes != 32<<20 || deps.MaxBodyBytesInFlight != 1<<20 ||
		policy.REST.DefaultCost != 1 || policy.Subscriptions.MaxPerPrincipal != 100 || policy.GraphQL.MaxDepth != 15 {
		t.Errorf("the documented defaults changed: %+v, %+v", deps, policy)
	}
}
