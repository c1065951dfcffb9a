package middleware

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/limiter"
)

// TestOutcomeHeaders checks the six rate-limit headers of a decision with
// a quota and a field limit, against the values spelled out, for a plan
// name that fits the values' inline room and one that does not, and the
// allocations they take: one in the common case (the bucket and the
// quota), two when the values need more room.
func TestOutcomeHeaders(t *testing.T) {
	for _, name := range []string{"anon", strings.Repeat("long-plan-name-", 12)} {
		lim, err := New(Dependencies{Clock: limiter.SystemClock{}}, Policy{
			Plans: map[string]budget.Plan{name: {Burst: 1000, Rate: 10, Per: time.Second,
				Quota: &budget.Quota{Limit: 50_000, Per: 24 * time.Hour}}},
			AnonymousPlan: name,
			FieldLimits:   map[string]budget.FieldLimit{"Repository.issues": {Limit: 100, Per: time.Second}},
		})
		if err != nil {
			t.Fatal(err)
		}
		defer lim.Close()
		set := lim.current()
		p, q, f := set.plans[name], set.plans[name].QuotaRule(), set.pol.Field("Repository.issues")
		bucket := limiter.Decision{Allowed: true, Limit: 1000, Remaining: 990, ResetAfter: time.Second + 1}
		quota := budget.Use{Quota: q, Capacity: 50_000,
			Decision: limiter.Decision{Allowed: true, Limit: 50_000, Remaining: 49_000, ResetAfter: 11 * time.Hour}}
		field := budget.Use{Field: f, Capacity: 100,
			Decision: limiter.Decision{Allowed: true, Limit: 100, Remaining: 7, ResetAfter: 930 * time.Millisecond}}
		now := time.Unix(1_800_000_000, 500_000_000)
		plan := fmt.Sprintf(`"%s";q=1000;w=100`, name)
		quotaPolicy := fmt.Sprintf(`"%s-daily";q=50000;w=86400`, name)
		for _, tc := range []struct {
			limits            []budget.Use
			policy, rateLimit string
		}{
			// The quota is closer to empty than the bucket (98% left against 99%).
			{[]budget.Use{quota}, plan + ", " + quotaPolicy, fmt.Sprintf(`"%s-daily";r=49000;t=39600`, name)},
			{[]budget.Use{quota, field}, plan + ", " + quotaPolicy + `, "Repository.issues";q=100;w=1`, `"Repository.issues";r=7;t=1`},
		} {
			h := http.Header{}
			o := budget.Outcome{Known: true, Decision: bucket, Limits: tc.limits}
			set.setOutcomeHeaders(h, p, &o, now)
			want := http.Header{}
			want[keyRateLimitPolicy] = []string{tc.policy}
			want[keyRateLimit] = []string{tc.rateLimit}
			want[keyXRateLimitLimit] = []string{"1000"}
			want[keyXRateLimitRemaining] = []string{"990"}
			want[keyXRateLimitUsed] = []string{"10"}
			want[keyXRateLimitReset] = []string{"1800000002"}
			if fmt.Sprint(h) != fmt.Sprint(want) {
				t.Errorf("%s, %d limits:\n got %v\nwant %v", name, len(tc.limits), h, want)
			}
		}
		// One allocation, and one more of the size they need for values
		// past its room.
		h := make(http.Header, 8)
		for _, tc := range []struct {
			limits     []budget.Use
			anon, long float64
		}{{[]budget.Use{quota}, 1, 2}, {[]budget.Use{quota, field}, 2, 2}} {
			o := budget.Outcome{Known: true, Decision: bucket, Limits: tc.limits}
			want := tc.anon
			if name != "anon" {
				want = tc.long
			}
			if n := testing.AllocsPerRun(100, func() { set.setOutcomeHeaders(h, p, &o, now) }); n != want {
				t.Errorf("%s, %d limits: the headers take %v allocations, want %v", name, len(tc.limits), n, want)
			}
		}
	}
}

func TestDecimalLen(t *testing.T) {
	ns := []int64{0, math.MaxInt64}
	for p := int64(1); ; p *= 10 {
		ns = append(ns, p-1, p, p+1, 2*p-1, 2*p)
		if p == 1e18 {
			break
		}
	}
	for _, n := range ns {
		if got, want := decimalLen(n), len(strconv.FormatInt(n, 10)); got != want {
			t.Errorf("decimalLen(%d) = %d, want %d", n, got, want)
		}
	}
}
