package prommetrics_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/internal/kept"
	"github.com/costguard/costguard/middleware"
	"github.com/costguard/costguard/middleware/prommetrics"
)

// The label values of a plan's series are copies, cut to kept.MaxName
// bytes: the series outlive the Event that named them.
func TestLabelValuesAreCopies(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := prommetrics.New(prommetrics.WithRegisterer(reg))
	if err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("p", 1<<20)
	m.ObserveDecision(&middleware.Event{Kind: middleware.KindGraphQL, Plan: big[:10], Lane: big[:1000], Outcome: budget.ClassAdmitted, RequestedCost: 1, Charged: 1})
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, f := range families {
		for _, mt := range f.GetMetric() {
			for _, l := range mt.GetLabel() {
				v := l.GetValue()
				if kept.Shares(v, big) || len(v) > kept.MaxName {
					t.Fatalf("%s{%s} is %d bytes of the Event's memory", f.GetName(), l.GetName(), len(v))
				}
				if strings.HasPrefix(v, "ppp") {
					seen++
				}
			}
		}
	}
	if seen == 0 {
		t.Fatal("no series of the plan")
	}
}
