package middleware

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/challenge"
	"github.com/costguard/costguard/identity"
	"github.com/costguard/costguard/overload"
)

// checkChallenges refuses lanes asking for a challenge nobody can issue.
func (l *Limiter) checkChallenges(s *settings) error {
	for _, ln := range s.lanes {
		if ln.Challenge != "" && l.challenger == nil {
			return fmt.Errorf("%w: lane %q asks for challenge %q, but Dependencies.Challenger is nil", ErrInvalidConfig, ln.Name, ln.Challenge)
		}
	}
	return nil
}

// admission is a request's slot among the process's requests in flight:
// the zero value holds none (no Overload configured, or refused).
type admission struct {
	permit overload.Permit
	began  time.Time
	lane   *atomic.Int64 // the lane's count of requests in flight
}

// done gives the slot back, with the request's latency for the adaptive
// capacity.
func (a admission) done() {
	if a.permit.Admitted() {
		a.permit.Done(time.Since(a.began)) // a latency, not the limiter's clock
		a.lane.Add(-1)
	}
}

// admit asks the shedder for a slot for a request of lane ln (nil: no
// lane, normal priority). A request that answers its lane's challenge runs
// at normal priority at least. ok is false when the request is shed (or
// its client left while it queued).
func (l *Limiter) admit(ctx context.Context, r *http.Request, id identity.Identity, ln *lane) (a admission, ok bool) {
	if l.shed == nil {
		return admission{}, true
	}
	p, queue := overload.Normal, time.Duration(0)
	if ln != nil {
		p, queue = ln.Priority, ln.Queue
	}
	permit, err := l.shed.Admit(ctx, p, queue)
	if err != nil && ln != nil && ln.Challenge != "" && below(p, overload.Normal) &&
		l.shed.InFlight() < l.shed.Threshold(overload.Normal) && l.solved(ctx, r, id) {
		// A solved challenge buys normal priority: checked, and its token
		// spent, only when its lane's priority was shed and normal's
		// would not be.
		permit, err = l.shed.Admit(ctx, overload.Normal, 0)
	}
	if err != nil {
		return admission{}, false
	}
	c := &l.noLaneInFlight
	if ln != nil {
		c = ln.inFlight
	}
	c.Add(1)
	return admission{permit: permit, began: time.Now(), lane: c}, true
}

// carryLaneCounts hands each lane of prev's counts of requests in flight
// on to the lane of the same name in next, so a request admitted before a
// reload is taken off the count it joined and Load keeps seeing it. A lane
// that next drops takes its counter with it, held only by its requests
// still in flight.
func carryLaneCounts(prev, next *settings) {
	if prev == nil {
		return
	}
	for _, ln := range next.lanes {
		for _, was := range prev.lanes {
			if was.Name == ln.Name {
				ln.inFlight = was.inFlight
				ln.dry.inFlight = was.inFlight
				break
			}
		}
	}
}

// shedAtTheDoor reports whether a GraphQL request of id is shed before its
// body is read: its lane is known from its identity alone and is past its
// threshold now (a request with a challenge answer goes on, to have it
// checked). A request it lets through is admitted as usual once parsed.
func (l *Limiter) shedAtTheDoor(r *http.Request, set *settings, id identity.Identity) bool {
	if l.shed == nil {
		return false
	}
	ln, known := set.laneWithoutDocument(id)
	if !known {
		return false
	}
	p := overload.Normal
	if ln != nil {
		p = ln.Priority
		if ln.Challenge != "" && r.Header.Get(challenge.HeaderChallengeResponse) != "" {
			return false
		}
	}
	return l.shed.InFlight() >= l.shed.Threshold(p)
}

// below reports whether p is shed before q.
func below(p, q overload.Priority) bool {
	for _, x := range overload.Priorities() { // in shed order: the first is shed first
		switch x {
		case p:
			return p != q
		case q:
			return false
		}
	}
	return false
}

// solved reports whether r answers its identity's challenge.
func (l *Limiter) solved(ctx context.Context, r *http.Request, id identity.Identity) bool {
	answer := r.Header.Get(challenge.HeaderChallengeResponse)
	return answer != "" && l.challenger.Verify(ctx, id.Key, answer, l.clock.Now()) == nil
}

// challenge sets the challenge header on a shed or refused response of a
// lane that asks for one.
func (l *Limiter) challenge(ctx context.Context, h http.Header, id identity.Identity, ln *lane) {
	if ln == nil || ln.Challenge == "" {
		return
	}
	if v, err := l.challenger.Challenge(ctx, id.Key, l.clock.Now()); err == nil {
		h.Set(challenge.HeaderChallenge, v)
	}
}

// shedRetryAfter is the jittered Retry-After of a shed request.
func (l *Limiter) shedRetryAfter() int64 { return l.shed.RetryAfter() }

// withDegradation lets handlers and resolvers ask Degraded(ctx, feature).
func (l *Limiter) withDegradation(r *http.Request) *http.Request {
	if l.shed == nil {
		return r
	}
	return r.WithContext(overload.WithDegradation(r.Context(), l.shed))
}

// Degraded reports whether feature is switched off by the degradation
// list of Dependencies.Overload (false without one). Handlers behind the REST
// and GraphQL wrappers can ask their request's context instead:
// overload.Degraded(ctx, feature).
func (l *Limiter) Degraded(feature string) bool { return l.shed != nil && l.shed.Degraded(feature) }

// admit takes the operation's slot among the requests in flight, before
// anything is priced or debited; a shed operation is refused with 503
// OVERLOADED and pays nothing.
func (e *costExtension) admit(ctx context.Context, st *requestState, ln *lane) *gqlerror.Error {
	r := st.r
	if r == nil {
		r = &http.Request{Header: graphql.GetOperationContext(ctx).Headers}
		if r.Header == nil {
			r.Header = http.Header{}
		}
	}
	a, ok := admission{}, true
	if e.l.shed != nil {
		a, ok = e.l.admit(ctx, r, st.id, ln)
	}
	if ok {
		sl, refused := e.l.engine.AcquireSlot(ctx, budget.Request{Key: st.id.Key, Rule: st.plan.Rule})
		st.mu.Lock()
		st.admission, st.slot = a, sl
		st.mu.Unlock()
		if refused == nil {
			return nil
		}
		code := refused.Verdict.Answer().Code
		st.record(*refused, 0, code)
		if refused.Verdict == budget.Unavailable {
			return codedError(code, refused.RetryAfter, "rate limiter unavailable; retry in %s", inSeconds(refused.RetryAfter))
		}
		return codedError(code, refused.RetryAfter, "too many requests in flight: plan %q allows %d at once; retry in %s",
			st.plan.Name(), st.plan.MaxConcurrent(), inSeconds(refused.RetryAfter))
	}
	ra := e.l.shedRetryAfter()
	st.record(budget.Outcome{Verdict: budget.Shed, RetryAfter: ra}, 0, budget.CodeOverloaded)
	return codedError(budget.CodeOverloaded, ra, "the service is overloaded; retry in %s", inSeconds(ra))
}

// release gives the operation's slots back (among the process's requests
// in flight, and among its principal's), once.
func (s *requestState) release() {
	s.mu.Lock()
	a, sl := s.admission, s.slot
	s.admission, s.slot = admission{}, budget.Slot{}
	s.mu.Unlock()
	sl.Release()
	if a.lane != nil {
		a.done()
	}
}

// InFlight reports the requests this process has admitted and not yet
// answered under Dependencies.Overload, and the most at once since New (both 0
// without Overload).
func (l *Limiter) InFlight() (now, peak int) {
	if l.shed == nil {
		return 0, 0
	}
	return l.shed.InFlight(), l.shed.Peak()
}

// Load is the load shedder's reading: the requests in flight, in all and
// per lane, against the capacity that sheds them.
type Load struct {
	// InFlight is the requests admitted and not yet answered; Peak the
	// most at once since New.
	InFlight, Peak int
	// Capacity is Overload.MaxInFlight, or the adaptive limit now.
	Capacity int
	// Lanes has one entry per lane of the configuration, in its order;
	// without lanes, one entry named "" for every request. A Reload
	// carries each lane's count to the lane of the same name, so requests
	// admitted before it are still counted.
	Lanes []LaneLoad
}

// LaneLoad is one lane's share of a Load.
type LaneLoad struct {
	Lane     string
	Priority overload.Priority
	// InFlight is the lane's requests admitted and not yet answered.
	InFlight int
	// ShedAt is the process's count of requests in flight at or above
	// which the lane's new requests are shed (overload.Shedder.Threshold
	// of its priority; the whole capacity for a critical lane).
	ShedAt int
}

// Load reads the load shedder; ok is false without Dependencies.Overload.
func (l *Limiter) Load() (ld Load, ok bool) {
	if l.shed == nil {
		return Load{}, false
	}
	ld = Load{InFlight: l.shed.InFlight(), Peak: l.shed.Peak(), Capacity: l.shed.Capacity()}
	set := l.settings.Load()
	if len(set.lanes) == 0 {
		ld.Lanes = []LaneLoad{l.laneLoad("", overload.Normal, &l.noLaneInFlight)}
		return ld, true
	}
	ld.Lanes = make([]LaneLoad, len(set.lanes))
	for i, ln := range set.lanes {
		ld.Lanes[i] = l.laneLoad(ln.Name, ln.Priority, ln.inFlight)
	}
	return ld, true
}

func (l *Limiter) laneLoad(name string, p overload.Priority, inFlight *atomic.Int64) LaneLoad {
	return LaneLoad{Lane: name, Priority: p, InFlight: int(inFlight.Load()), ShedAt: l.shed.Threshold(p)}
}
