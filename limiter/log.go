package limiter

// LogEntry records N units of cost admitted at one instant. A SlidingLog
// state is a []LogEntry sorted by At, oldest first; nil is a fresh key.
// The log means one timestamp per admitted unit: an entry with N = 3 is
// three timestamps that happen to be equal (a Redis sorted set stores them
// as three unique members), so same-instant requests are all counted.
type LogEntry struct {
	// At is when the units were admitted, in µs since the Unix epoch.
	At int64
	// N is the number of units admitted at At, at least 1.
	N int64
}

// TakeSlidingLog is the SlidingLog transition. A unit admitted at t counts
// against every instant in [t, t + P), so with now in µs since the Unix
// epoch:
//
//	drop entries with At ≤ now − P
//	n = Σ N over what is left
//	admit ⇔ n + cost ≤ Rate;  then append {now, cost}
//
//	Limit      = Rate
//	Remaining  = max(0, Rate − n)                 // n after this decision
//	ResetAfter = newest.At + P − now if n > 0, else 0
//	RetryAfter = t_k + P − now                    // rejections only
//
// where t_k is the timestamp of the k-th oldest unit, k = n + cost − Rate:
// once it leaves the window exactly enough room is free. If the clock reads
// earlier than the newest entry, time is taken to stand at that entry. Cost
// 0 peeks; a cost above Rate returns ErrCostExceedsCapacity; the other
// errors behave as in TakeBucket.
//
// Like append, TakeSlidingLog may reuse log's backing array: pass a log you
// own and keep only the returned one. The log never holds more than Rate
// units (at most MaxLogRate).
func TakeSlidingLog(l Limit, log []LogEntry, now, cost int64) ([]LogEntry, Decision, error) {
	p, err := l.windowParams(SlidingLog)
	if err != nil {
		return log, Decision{}, err
	}
	if err := checkCost("cost", cost); err != nil {
		return log, Decision{}, err
	}
	log, now = p.prune(log, now)
	n := logUnits(log)
	if cost > l.Rate {
		return log, p.logDecision(l, log, n, now, false), ExceedsCapacity(cost, l.Rate)
	}
	if n+cost > l.Rate {
		d := p.logDecision(l, log, n, now, false)
		d.RetryAfter = micros(p.logRetry(log, n+cost-l.Rate, now))
		return log, d, nil
	}
	if cost > 0 {
		if last := len(log) - 1; last >= 0 && log[last].At == now {
			log[last].N += cost
		} else {
			log = append(log, LogEntry{At: now, N: cost})
		}
		n += cost
	}
	return log, p.logDecision(l, log, n, now, true), nil
}

// RefundSlidingLog removes the amount newest units from the log (the ones
// the refunded request most likely added), or all of them. It may reuse
// log's backing array like TakeSlidingLog. Refund decisions report Allowed
// true.
func RefundSlidingLog(l Limit, log []LogEntry, now, amount int64) ([]LogEntry, Decision, error) {
	p, err := l.windowParams(SlidingLog)
	if err != nil {
		return log, Decision{}, err
	}
	if err := checkCost("refund", amount); err != nil {
		return log, Decision{}, err
	}
	log, now = p.prune(log, now)
	for amount > 0 && len(log) > 0 {
		last := &log[len(log)-1]
		if last.N > amount {
			last.N -= amount
			break
		}
		amount -= last.N
		log = log[:len(log)-1]
	}
	return log, p.logDecision(l, log, logUnits(log), now, true), nil
}

// prune drops expired and malformed entries and returns the effective now,
// never earlier than the newest entry.
func (p params) prune(log []LogEntry, now int64) ([]LogEntry, int64) {
	now = clampNow(now)
	if len(log) > 0 {
		now = max(now, min(log[len(log)-1].At, MaxNow))
	}
	i := 0
	for i < len(log) && (log[i].At <= now-p.period || log[i].N <= 0) {
		i++
	}
	if i == len(log) {
		return log[:0], now
	}
	return log[i:], now
}

func logUnits(log []LogEntry) int64 {
	var n int64
	for _, e := range log {
		n += clamp(e.N, 0, MaxLogRate)
	}
	return n
}

// logRetry is the wait until the k oldest units have left the window.
func (p params) logRetry(log []LogEntry, k, now int64) int64 {
	for _, e := range log {
		if k -= clamp(e.N, 0, MaxLogRate); k <= 0 {
			return e.At + p.period - now
		}
	}
	return p.period // unreachable for a consistent log: k ≤ n
}

func (p params) logDecision(l Limit, log []LogEntry, n, now int64, allowed bool) Decision {
	d := Decision{Allowed: allowed, Limit: l.Rate, Remaining: max(0, l.Rate-n)}
	if n > 0 {
		d.ResetAfter = micros(log[len(log)-1].At + p.period - now)
	}
	return d
}
