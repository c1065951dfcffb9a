package prommetrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/costguard/costguard/identity/keycache"
)

// KeyCache exports what a keycache.Cache did and holds, read from its
// Stats at each scrape:
//
//	costguard_key_cache_answers_total{result}    counter
//	    keys answered without a lookup of their own: result is hit (a known
//	    key), unknown_hit (a key remembered as unknown), joined (waited for
//	    another caller's lookup of the same key) or not_looked_up (an unseen
//	    key refused because the lookup budget was spent)
//	costguard_key_cache_lookups_total             counter
//	    calls to the backing KeyLookup (the database's queries)
//	costguard_key_cache_lookup_errors_total       counter
//	    lookups that failed with another error than "unknown key"
//	costguard_key_cache_entries{kind}             gauge
//	    entries held now: kind is known or unknown
//
// A flood of random keys shows as not_looked_up rising while lookups stay
// at the cache's lookup rate (docs/keys.md). Register it next to the
// Metrics: reg.MustRegister(prommetrics.KeyCache(cache)).
func KeyCache(c *keycache.Cache) prometheus.Collector {
	return keyCacheCollector{stats: c.Stats}
}

type keyCacheCollector struct{ stats func() keycache.Stats }

var (
	keyCacheAnswers = prometheus.NewDesc("costguard_key_cache_answers_total",
		"API keys the key cache answered without a lookup of their own, by result.", []string{labelResult}, nil)
	keyCacheLookups = prometheus.NewDesc("costguard_key_cache_lookups_total",
		"Calls of the key cache to its backing key lookup.", nil, nil)
	keyCacheErrors = prometheus.NewDesc("costguard_key_cache_lookup_errors_total",
		"Backing key lookups that failed with another error than an unknown key.", nil, nil)
	keyCacheEntries = prometheus.NewDesc("costguard_key_cache_entries",
		"Entries the key cache holds, by kind.", []string{"kind"}, nil)
)

func (keyCacheCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range [...]*prometheus.Desc{keyCacheAnswers, keyCacheLookups, keyCacheErrors, keyCacheEntries} {
		ch <- d
	}
}

func (k keyCacheCollector) Collect(ch chan<- prometheus.Metric) {
	s := k.stats()
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	counter(keyCacheAnswers, s.Hits, "hit")
	counter(keyCacheAnswers, s.UnknownHits, "unknown_hit")
	counter(keyCacheAnswers, s.Joined, "joined")
	counter(keyCacheAnswers, s.NotLookedUp, "not_looked_up")
	counter(keyCacheLookups, s.Lookups)
	counter(keyCacheErrors, s.Errors)
	ch <- prometheus.MustNewConstMetric(keyCacheEntries, prometheus.GaugeValue, float64(s.Known), "known")
	ch <- prometheus.MustNewConstMetric(keyCacheEntries, prometheus.GaugeValue, float64(s.Unknown), "unknown")
}
