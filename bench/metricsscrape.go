package main

// The server's own count of what it admitted, read from the example
// server's /metrics during the overload scenario: the recovery peak is
// the server's admission rate, not the clients' answers, which bunch up
// when the load generator is short of CPU.

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// admittedSample is the server's admitted count at one instant.
type admittedSample struct {
	// at is the midpoint of the scrape's request and response: the server
	// read its counters somewhere in between.
	at       time.Time
	admitted int64
}

// decisionsMetric is the counter every decision increments.
const decisionsMetric = "costguard_decisions_total{"

// parseAdmitted sums the samples of costguard_decisions_total whose
// outcome is "admitted", over every plan, kind and lane.
func parseAdmitted(r io.Reader) (int64, error) {
	var total int64
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	found := false
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, decisionsMetric) {
			continue
		}
		found = true
		end := strings.LastIndexByte(line, '}')
		if end < 0 || !strings.Contains(line[:end], `outcome="admitted"`) {
			continue
		}
		fields := strings.Fields(line[end+1:])
		if len(fields) == 0 {
			return 0, fmt.Errorf("bench: /metrics: no value in %q", line)
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			return 0, fmt.Errorf("bench: /metrics: %q: %w", line, err)
		}
		total += int64(v)
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("bench: /metrics: %w", err)
	}
	if !found {
		return 0, fmt.Errorf("bench: /metrics: no %s samples", strings.TrimSuffix(decisionsMetric, "{"))
	}
	return total, nil
}

// scrapeAdmitted reads base+"/metrics" every interval until ctx is done
// and returns the samples, and the first error that kept a scrape from
// counting (the scrapes go on after it).
func scrapeAdmitted(ctx context.Context, base string, interval time.Duration) ([]admittedSample, error) {
	hc := &http.Client{Timeout: 2 * time.Second}
	defer hc.CloseIdleConnections()
	var samples []admittedSample
	var firstErr error
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		t0 := time.Now()
		n, err := scrapeOnce(ctx, hc, base+"/metrics")
		if ctx.Err() != nil {
			return samples, firstErr
		}
		if err == nil {
			samples = append(samples, admittedSample{at: t0.Add(time.Since(t0) / 2), admitted: n})
		} else if firstErr == nil {
			firstErr = err
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return samples, firstErr
		}
	}
}

func scrapeOnce(ctx context.Context, hc *http.Client, url string) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, fmt.Errorf("bench: /metrics: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return 0, fmt.Errorf("bench: /metrics: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("bench: /metrics: status %d", resp.StatusCode)
	}
	return parseAdmitted(bytes.NewReader(body))
}

// peakAdmittedRate is the highest admission rate, per second, between two
// samples at least span apart, both in [from, to]; ok false without such
// a pair. The span keeps a scrape that came back late, and the next that
// did not, from making a spike of a short interval.
func peakAdmittedRate(samples []admittedSample, from, to time.Time, span time.Duration) (float64, bool) {
	best, ok := 0.0, false
	for i, a := range samples {
		if a.at.Before(from) {
			continue
		}
		for _, b := range samples[i+1:] {
			if b.at.After(to) {
				break
			}
			if dt := b.at.Sub(a.at); dt >= span {
				best, ok = max(best, float64(b.admitted-a.admitted)/dt.Seconds()), true
				break
			}
		}
	}
	return best, ok
}

// peakMetric is the example server's high-water mark of the requests its
// load shedder admitted at once.
const peakMetric = "costguard_requests_in_flight_peak"

// scrapeGauge reads one unlabelled gauge from base+"/metrics".
func scrapeGauge(ctx context.Context, base, name string) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("bench: /metrics: %w", err)
	}
	defer resp.Body.Close()
	return parseGauge(io.LimitReader(resp.Body, 8<<20), name)
}

// parseGauge finds the sample of the unlabelled metric name.
func parseGauge(r io.Reader, name string) (float64, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		value, ok := strings.CutPrefix(sc.Text(), name+" ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			return 0, fmt.Errorf("bench: /metrics: %s: %w", name, err)
		}
		return v, nil
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("bench: /metrics: %w", err)
	}
	return 0, fmt.Errorf("bench: /metrics: no %s sample", name)
}
