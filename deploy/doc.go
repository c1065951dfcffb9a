// Package deploy holds what runs beside costguard in production rather
// than code: the Prometheus alert rules (prometheus/alerts.yml, with
// promtool unit tests in prometheus/alerts_test.yml) and a Grafana
// dashboard (grafana/costguard.json) over the metrics docs/operations.md
// lists. Its tests check them for real: promtool checks and unit-tests the
// rules, and, with the long suites on (COSTGUARD_LONG_TESTS=1, or CI=true),
// a Prometheus started by the test scrapes the example server under load,
// answers every panel's query and fires the breaker and fallback alerts
// when the test stops Redis:
//
//	COSTGUARD_LONG_TESTS=1 go test -v ./deploy
package deploy
