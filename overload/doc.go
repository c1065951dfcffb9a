// Package overload protects one process from more work than it can do: it
// counts the requests in flight, sheds the lowest priorities first when
// they pile up, lets critical requests queue briefly for a slot, can adapt
// its capacity to observed latency, and switches named features off as
// load rises. It is pure Go: no HTTP, no GraphQL. The middleware maps a
// refusal to 503 with code OVERLOADED and puts the Shedder in each
// request's context; this package only decides.
//
//	shed, err := overload.New(overload.Config{
//		MaxInFlight: 64,
//		Degradation: []overload.Feature{{Name: "recommendations", At: 0.7}, {Name: "search", At: 0.85}},
//	})
//
//	permit, err := shed.Admit(ctx, overload.Normal, 0)
//	if errors.Is(err, overload.ErrOverloaded) {
//		// 503, Retry-After: shed.RetryAfter(); nothing is debited
//	}
//	start := time.Now()
//	defer func() { permit.Done(time.Since(start)) }() // or Drop, or Ignore: exactly once
//	ctx = overload.WithDegradation(ctx, shed)
//	…
//	if !overload.Degraded(ctx, "recommendations") { … } // in a resolver
//
// # Shedding
//
// Each Priority has a share of the capacity, Config.ShedAt (defaults:
// sheddable 0.5, normal 0.8, high 0.9; critical always 1). A request of
// priority P is refused while the requests in flight are at or above P's
// threshold, ⌊ShedAt[P] × capacity⌋: the shares are rounded to a millionth
// and the product rounded down, in integer arithmetic. As load rises,
// sheddable requests go first, then normal, then high, and the capacity
// above high's threshold is kept for critical requests, which may use all
// of it. At capacity 64 the thresholds are 32, 51, 57 and 64. Validation
// requires every priority to get at least one slot.
//
// The count is exact: one counter, moved under one mutex and only below
// the threshold, so in flight never exceeds the capacity; a request the
// count already refuses is refused without taking the mutex, so shedding
// stays cheap under overload. An admission that does not queue never
// waits for capacity and never reads ctx, and none allocates.
//
// # Queueing
//
// A critical lane may set a queue time (queue: 2s). A critical request
// that finds the capacity full then waits, first in first out, for a slot
// instead of being refused: each release hands its slot to the oldest
// waiter. The wait ends with a slot, with ErrOverloaded when the queue
// time passes, or with the context's error when the client goes (leaving
// no slot taken). While anyone waits, nothing else is admitted: the slots
// freed belong to the queue, and a new queueing request joins its back. Config.MaxQueue bounds the waiters
// (default MaxInFlight); one more is refused at once. Only critical lanes
// may queue (ValidateLane).
//
// # Adaptive capacity
//
// With Config.Adaptive the capacity follows latency, additive increase
// and multiplicative decrease (AIMD) on a latency gradient. The caller
// reports each request's latency when it releases the slot (Permit.Done);
// Permit.Drop reports a timeout or other overload failure; Permit.Ignore
// reports nothing. Two moving averages of latency are kept, a short one
// (Tuning.ShortWindow, 10 samples) and a long one (Tuning.LongWindow, 500):
// each sample x moves an average m by (x − m) / window. The ceiling is
// Tuning.Tolerance (1.5) times the long average, or Tuning.Target when one
// is set and lower. Congestion is a drop, or a sample where both x and the
// short average are above the ceiling: the average keeps a lone slow
// request from counting, the sample keeps the average's lag from counting
// once responses are fast again.
//
//   - On congestion the capacity becomes ⌊capacity × Tuning.Backoff⌋
//     (0.9), never below Tuning.MinInFlight (default ⌈MaxInFlight/10⌉,
//     and at least the capacity that gives every priority a slot). Only a
//     request admitted since the previous decrease can cause the next, so
//     the responses of one slow burst, in flight together, cut the
//     capacity once, not once each.
//   - After as many good samples in a row as the capacity, it grows by
//     one, never above MaxInFlight, where it starts: from 51 back to 64
//     takes 51 + 52 + … + 63 = 741 good requests.
//
// The capacity so falls fast when latency climbs and comes back slowly. A
// latency that stays high becomes the long average's normal after a few
// LongWindow samples; set Target to keep an absolute ceiling. When the
// capacity shrinks below the requests already running, none is
// interrupted: new ones wait or are shed until enough finish.
//
// # Degradation
//
// Config.Degradation names features to switch off, in order, as load
// (in flight ÷ capacity) rises: a feature goes off once load reaches its
// At, and only after the features listed before it; it comes back, last
// gone first, once load is below At − Config.Hysteresis (0.1) and it has
// been off for at least Config.Hold (5s, by Config.Clock). Load is
// re-evaluated at each admission and release, so the answer a request
// sees is current as of its own admission. Asking (Degraded, or
// Shedder.Degraded) is a map lookup and an atomic load.
//
// # Retry-After
//
// A shed request is told to retry after a whole number of seconds drawn
// at random from 1 to ⌈RetryAfterMax⌉ (default 3): a shed has no exact
// time to wait, and spreading the clients keeps them from returning as one
// wave.
//
// See docs/overload.md for a worked example at capacity 64.
package overload
