package limiter

// WindowState is one key's state under FixedWindow and SlidingCounter. The
// zero value is a fresh key.
//
// Windows are aligned on multiples of Period since the Unix epoch: window
// w covers [w × P, (w+1) × P) µs, so "100 per day" resets at midnight UTC.
type WindowState struct {
	// Window is the index ⌊t / P⌋ of the window Count belongs to.
	Window int64
	// Count is the cost admitted in Window.
	Count int64
	// Prev is the cost admitted in Window − 1 (SlidingCounter only).
	Prev int64
}

// TakeFixedWindow is the FixedWindow transition. With P = Period in µs and
// now in µs since the Unix epoch:
//
//	w = ⌊now / P⌋, e = now − w × P              // window index, elapsed in it
//	Count = 0 if w ≠ Window                       // a new window starts empty
//	admit ⇔ Count + cost ≤ Rate;  then Count += cost
//
//	Limit      = Rate
//	Remaining  = Rate − Count
//	ResetAfter = P − e if Count > 0, else 0      // the window's end
//	RetryAfter = P − e                            // rejections only
//
// If the clock reads earlier than the stored window (a clock stepped back),
// time is taken to stand at that window's start. Cost 0 peeks; a cost above
// Rate returns ErrCostExceedsCapacity; see TakeBucket for the other error
// cases, which behave the same.
//
// A fixed window admits up to 2 × Rate across a boundary: Rate just before
// it and Rate again just after.
func TakeFixedWindow(l Limit, s WindowState, now, cost int64) (WindowState, Decision, error) {
	p, err := l.windowParams(FixedWindow)
	if err != nil {
		return s, Decision{}, err
	}
	if err := checkCost("cost", cost); err != nil {
		return s, Decision{}, err
	}
	s, e := p.roll(l, s, now)
	s.Prev = 0
	if cost > l.Rate {
		return s, p.fixedDecision(l, s, e, false), ExceedsCapacity(cost, l.Rate)
	}
	if s.Count+cost > l.Rate {
		d := p.fixedDecision(l, s, e, false)
		d.RetryAfter = micros(p.period - e)
		return s, d, nil
	}
	s.Count += cost
	return s, p.fixedDecision(l, s, e, true), nil
}

// RefundFixedWindow gives amount back to the current window:
// Count = max(0, Count − amount). Cost charged in an earlier window has
// already expired and is not carried over. Refund decisions report Allowed
// true.
func RefundFixedWindow(l Limit, s WindowState, now, amount int64) (WindowState, Decision, error) {
	p, err := l.windowParams(FixedWindow)
	if err != nil {
		return s, Decision{}, err
	}
	if err := checkCost("refund", amount); err != nil {
		return s, Decision{}, err
	}
	s, e := p.roll(l, s, now)
	s.Prev = 0
	s.Count = max(0, s.Count-amount)
	return s, p.fixedDecision(l, s, e, true), nil
}

// TakeSlidingCounter is the SlidingCounter transition: two adjacent fixed
// windows, the previous one weighted by how much of it still overlaps the
// trailing Period. With w, e as in TakeFixedWindow, Count = cur and
// Prev = prev rolled forward (one window on: prev = cur, cur = 0; two or
// more: both 0):
//
//	estimate = prev × (P − e) / P + cur           // rational, never rounded
//	admit   ⇔ cur + cost ≤ Rate  and  prev × (P − e) ≤ (Rate − cur − cost) × P
//
//	Limit      = Rate
//	Remaining  = max(0, Rate − cur − ⌈prev × (P − e) / P⌉)
//	ResetAfter = 2P − e if cur > 0; P − e if prev > 0; else 0
//
// RetryAfter (rejections only) is the first instant the same cost fits if
// nothing else is admitted, which exists because the estimate never rises
// on its own:
//
//	a = Rate − cur − cost
//	if a ≥ 0 and prev > 0 and t = P − ⌊a × P / prev⌋ < P:  RetryAfter = t − e
//	else:  RetryAfter = (P − e) + t2, t2 = 0 if cur = 0,
//	                    else max(0, P − ⌊(Rate − cost) × P / cur⌋)
//
// Every product is at most Rate × P, which Validate bounds by 2^53 − 1.
// Clock steps back, peeks and errors behave as in TakeFixedWindow.
func TakeSlidingCounter(l Limit, s WindowState, now, cost int64) (WindowState, Decision, error) {
	p, err := l.windowParams(SlidingCounter)
	if err != nil {
		return s, Decision{}, err
	}
	if err := checkCost("cost", cost); err != nil {
		return s, Decision{}, err
	}
	s, e := p.roll(l, s, now)
	if cost > l.Rate {
		return s, p.slidingDecision(l, s, e, false), ExceedsCapacity(cost, l.Rate)
	}
	rest := p.period - e
	if a := l.Rate - s.Count - cost; a < 0 || s.Prev*rest > a*p.period {
		d := p.slidingDecision(l, s, e, false)
		d.RetryAfter = micros(p.slidingRetry(l, s, e, cost))
		return s, d, nil
	}
	s.Count += cost
	return s, p.slidingDecision(l, s, e, true), nil
}

// RefundSlidingCounter gives amount back, first to the current window's
// count and any excess to the previous window's (cost charged just before a
// boundary is refunded just after it): cur and prev never go below zero.
// Refund decisions report Allowed true.
func RefundSlidingCounter(l Limit, s WindowState, now, amount int64) (WindowState, Decision, error) {
	p, err := l.windowParams(SlidingCounter)
	if err != nil {
		return s, Decision{}, err
	}
	if err := checkCost("refund", amount); err != nil {
		return s, Decision{}, err
	}
	s, e := p.roll(l, s, now)
	fromCur := min(amount, s.Count)
	s.Count -= fromCur
	s.Prev = max(0, s.Prev-(amount-fromCur))
	return s, p.slidingDecision(l, s, e, true), nil
}

func (l Limit) windowParams(want Algorithm) (params, error) {
	if l.Algorithm != want {
		return params{}, wrongAlgorithm(want.String(), l.Algorithm)
	}
	return l.params()
}

// roll moves s to the window holding now and returns the elapsed µs in it.
// Stored counts are clamped to [0, Rate].
func (p params) roll(l Limit, s WindowState, now int64) (WindowState, int64) {
	now = clampNow(now)
	w := now / p.period
	stored := clamp(s.Window, 0, MaxNow/p.period)
	e := now - w*p.period
	if w < stored { // the clock went back: stand at the stored window's start
		w, e = stored, 0
	}
	cur, prev := clamp(s.Count, 0, l.Rate), clamp(s.Prev, 0, l.Rate)
	switch w - stored {
	case 0:
	case 1:
		cur, prev = 0, cur
	default:
		cur, prev = 0, 0
	}
	return WindowState{Window: w, Count: cur, Prev: prev}, e
}

func (p params) fixedDecision(l Limit, s WindowState, e int64, allowed bool) Decision {
	d := Decision{Allowed: allowed, Limit: l.Rate, Remaining: l.Rate - s.Count}
	if s.Count > 0 {
		d.ResetAfter = micros(p.period - e)
	}
	return d
}

func (p params) slidingDecision(l Limit, s WindowState, e int64, allowed bool) Decision {
	rest := p.period - e
	d := Decision{
		Allowed:   allowed,
		Limit:     l.Rate,
		Remaining: max(0, l.Rate-s.Count-ceilDiv(s.Prev*rest, p.period)),
	}
	switch {
	case s.Count > 0:
		d.ResetAfter = micros(rest + p.period)
	case s.Prev > 0:
		d.ResetAfter = micros(rest)
	}
	return d
}

// slidingRetry is the exact wait, in µs, until cost (≤ Rate) fits.
func (p params) slidingRetry(l Limit, s WindowState, e, cost int64) int64 {
	if a := l.Rate - s.Count - cost; a >= 0 && s.Prev > 0 {
		// In this window: the first e' with prev × (P − e') ≤ a × P.
		if t := p.period - a*p.period/s.Prev; t < p.period {
			return t - e
		}
	}
	// In the next window, where prev' = cur and cur' = 0.
	var t2 int64
	if s.Count > 0 {
		t2 = max(0, p.period-(l.Rate-cost)*p.period/s.Count)
	}
	return p.period - e + t2
}
