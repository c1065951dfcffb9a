package middleware

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/vektah/gqlparser/v2/ast"

	"github.com/costguard/costguard/budget"
	"github.com/costguard/costguard/identity"
	"github.com/costguard/costguard/overload"
)

// ChallengePoW is the Lane.Challenge of a proof-of-work challenge.
const ChallengePoW = "pow"

// Lane is a class of traffic: the requests its Match holds for, served at
// its Priority. Policy.Lanes lists lanes in order; the first whose Match
// holds takes a request, and a request no lane matches goes to the last.
type Lane struct {
	// Name labels the lane in events, metrics and logs: 1 to budget.MaxNameBytes bytes of printable ASCII.
	Name     string            `yaml:"name"`
	Priority overload.Priority `yaml:"priority"`
	Match    LaneMatch         `yaml:"match"`
	// Queue is how long a request of a critical lane waits for capacity
	// under overload instead of being refused (0: it is not queued).
	Queue time.Duration `yaml:"queue"`
	// Challenge "pow" makes refused or shed requests of the lane carry a
	// proof-of-work challenge.
	Challenge string `yaml:"challenge"`
	// Budget, when set, is a token bucket per principal for this lane,
	// debited on top of the plan's: a request pays both or neither.
	Budget *LaneBudget `yaml:"budget"`
}

// LaneBudget is a lane's token bucket, per principal: Burst points, Rate
// of them restored every Per, checked as a plan's are.
type LaneBudget struct {
	Burst int64         `yaml:"burst"`
	Rate  int64         `yaml:"rate"`
	Per   time.Duration `yaml:"per"`
}

// LaneMatch says which requests a lane takes. GraphQL and REST are
// alternatives (a GraphQL operation selecting one of the GraphQL root
// fields, or a REST request matching one of the REST patterns); Plans,
// Authenticated and Anonymous narrow the match further. A LaneMatch that
// sets nothing matches every request.
type LaneMatch struct {
	// GraphQL lists root-field coordinates ("Mutation.createIssue",
	// "Query.search"): an operation selecting any of them at its root,
	// through fragments too, matches.
	GraphQL []string `yaml:"graphql"`
	// REST lists net/http ServeMux patterns ("POST /api/orders").
	REST []string `yaml:"rest"`
	// Plans lists plan names; the request's plan must be one of them.
	Plans []string `yaml:"plans"`
	// Authenticated: only requests of a principal or an API key.
	Authenticated bool `yaml:"authenticated"`
	// Anonymous: only requests known by their address alone.
	Anonymous bool `yaml:"anonymous"`
}

// lane is a validated Lane.
type lane struct {
	Lane
	index  int
	fields map[string]bool // GraphQL root coordinates
	routes *http.ServeMux  // REST patterns; nil when none
	plans  map[string]bool
	budget *budget.Rule // Budget's bucket, decided as a plan is; nil without
	// dry is the lane a dry run of this lane takes: itself, or a copy at
	// normal priority without a queue when it is above normal or queues.
	dry *lane
	// inFlight counts the lane's requests admitted and not yet answered,
	// its dry copy's included; Reload hands it on to the lane of the same
	// name (carryLaneCounts).
	inFlight *atomic.Int64
}

// dryIf is ln's dry copy when dry, else ln.
func (ln *lane) dryIf(dry bool) *lane {
	if dry && ln != nil {
		return ln.dry
	}
	return ln
}

// budgetRule is the lane's budget, nil for no lane or none.
func (ln *lane) budgetRule() *budget.Rule {
	if ln == nil {
		return nil
	}
	return ln.budget
}

// name is the lane's name, "" for no lane.
func (ln *lane) name() string {
	if ln == nil {
		return ""
	}
	return ln.Name
}

// keyed is err about the configuration key at path (budget.ConfigError).
func keyed(err error, path ...string) error { return &budget.ConfigError{Path: path, Err: err} }

// buildLanes validates the lanes of cfg against s's plans.
func (s *settings) buildLanes(lanes []Lane) error {
	seen := make(map[string]bool, len(lanes))
	for i, l := range lanes {
		where := fmt.Sprintf("lane %d", i)
		if !budget.ValidName(l.Name) {
			return keyed(fmt.Errorf("%w: %s: name %q must be 1 to %d bytes of printable ASCII", ErrInvalidConfig, where, l.Name, budget.MaxNameBytes), "lanes", strconv.Itoa(i), "name")
		}
		where = fmt.Sprintf("lane %q", l.Name)
		if seen[l.Name] {
			return keyed(fmt.Errorf("%w: %s is declared twice", ErrInvalidConfig, where), "lanes", strconv.Itoa(i), "name")
		}
		seen[l.Name] = true
		if err := overload.ValidateLane(l.Priority, l.Queue); err != nil {
			return keyed(fmt.Errorf("%w: %s: %w", ErrInvalidConfig, where, err), "lanes", strconv.Itoa(i), "queue")
		}
		if l.Challenge != "" && l.Challenge != ChallengePoW {
			return keyed(fmt.Errorf("%w: %s: challenge %q is not %q", ErrInvalidConfig, where, l.Challenge, ChallengePoW), "lanes", strconv.Itoa(i), "challenge")
		}
		if l.Match.Authenticated && l.Match.Anonymous {
			return keyed(fmt.Errorf("%w: %s: a match cannot ask for both authenticated and anonymous requests", ErrInvalidConfig, where), "lanes", strconv.Itoa(i), "match")
		}
		ln := &lane{Lane: l, index: i, inFlight: new(atomic.Int64)}
		ln.dry = ln
		if below(overload.Normal, l.Priority) || l.Queue > 0 {
			// A dry run of this lane: the same lane at most at normal
			// priority, never queued.
			d := *ln
			d.Queue = 0
			if below(overload.Normal, l.Priority) {
				d.Priority = overload.Normal
			}
			d.dry = &d
			ln.dry = &d
		}
		if len(l.Match.GraphQL) > 0 {
			ln.fields = make(map[string]bool, len(l.Match.GraphQL))
			for _, c := range l.Match.GraphQL {
				typ, field, ok := strings.Cut(c, ".")
				if !ok || typ == "" || field == "" || strings.ContainsAny(field, ". ") {
					return keyed(fmt.Errorf("%w: %s: GraphQL match %q is not a coordinate such as \"Mutation.createIssue\"", ErrInvalidConfig, where, c), "lanes", strconv.Itoa(i), "match")
				}
				ln.fields[c] = true
			}
		}
		if len(l.Match.REST) > 0 {
			ln.routes = http.NewServeMux()
			for _, pattern := range l.Match.REST {
				if err := handlePattern(ln.routes, pattern, routeCost(0)); err != nil {
					return keyed(fmt.Errorf("%w: %s: REST match %q: %v", ErrInvalidConfig, where, pattern, err), "lanes", strconv.Itoa(i), "match")
				}
			}
		}
		if len(l.Match.Plans) > 0 {
			ln.plans = make(map[string]bool, len(l.Match.Plans))
			for _, p := range l.Match.Plans {
				if _, ok := s.plans[p]; !ok {
					return keyed(fmt.Errorf("%w: %s: plan %q is not among the plans (%s)", ErrInvalidConfig, where, p, s.planList()), "lanes", strconv.Itoa(i), "match")
				}
				ln.plans[p] = true
			}
		}
		ln.budget = s.pol.Lane(l.Name) // compiled with the policy
		s.lanes = append(s.lanes, ln)
	}
	return nil
}

// laneForREST picks the lane of a REST request: nil when no lanes are
// configured.
func (s *settings) laneForREST(r *http.Request, id identity.Identity) *lane {
	for _, ln := range s.lanes {
		if ln.fields != nil && ln.routes == nil {
			continue // a GraphQL-only match
		}
		if ln.routes != nil {
			if handler, _ := ln.routes.Handler(r); !isRoute(handler) {
				continue
			}
		}
		if ln.holdsFor(id) {
			return ln
		}
	}
	return s.lastLane()
}

// isRoute reports whether a ServeMux answered with one of its patterns
// (not its not-found handler).
func isRoute(h http.Handler) bool {
	_, ok := h.(routeCost)
	return ok
}

// laneForGraphQL picks the lane of a GraphQL operation from the root
// fields that will run (after @skip and @include, with vars): nil when no
// lanes are configured. A request refused before it was parsed (op nil)
// has no root fields: only lanes that do not match on GraphQL fields can
// take it. A dry run (dry: it runs no resolver) never takes a lane above
// normal priority nor queues (lane.dry).
func (s *settings) laneForGraphQL(doc *ast.QueryDocument, op *ast.OperationDefinition, vars map[string]any, id identity.Identity, dry bool) *lane {
	if len(s.lanes) == 0 {
		return nil
	}
	var roots map[string]bool
	for _, ln := range s.lanes {
		if ln.routes != nil && ln.fields == nil {
			continue // a REST-only match
		}
		if ln.fields != nil {
			if roots == nil && op != nil {
				roots = rootCoordinates(doc, op, vars)
			}
			if !anyIn(roots, ln.fields) {
				continue
			}
		}
		if ln.holdsFor(id) {
			return ln.dryIf(dry)
		}
	}
	return s.lastLane().dryIf(dry)
}

// laneWithoutDocument is the lane of a GraphQL request of id when it can
// be known before the document is read (known false when a lane that
// matches on GraphQL fields could take it): identity-only lanes decide it.
func (s *settings) laneWithoutDocument(id identity.Identity) (ln *lane, known bool) {
	if len(s.lanes) == 0 {
		return nil, false
	}
	for _, ln := range s.lanes {
		if ln.routes != nil && ln.fields == nil {
			continue // a REST-only match
		}
		if !ln.holdsFor(id) {
			continue
		}
		if ln.fields != nil {
			return nil, false // the document decides
		}
		return ln, true
	}
	return s.lastLane(), true
}

// holdsFor checks the identity conditions of ln's match.
func (ln *lane) holdsFor(id identity.Identity) bool {
	if ln.plans != nil && !ln.plans[id.Plan] {
		return false
	}
	anonymous := id.Anonymous()
	return !(ln.Match.Authenticated && anonymous) && !(ln.Match.Anonymous && !anonymous)
}

func (s *settings) lastLane() *lane {
	if len(s.lanes) == 0 {
		return nil
	}
	return s.lanes[len(s.lanes)-1]
}

func anyIn(have, want map[string]bool) bool {
	for c := range have {
		if want[c] {
			return true
		}
	}
	return false
}

// rootCoordinates lists the "Type.field" coordinates an operation selects
// at its root, through fragment spreads and inline fragments (validation
// has ruled out cycles; seen bounds the walk anyway).
func rootCoordinates(doc *ast.QueryDocument, op *ast.OperationDefinition, vars map[string]any) map[string]bool {
	roots := make(map[string]bool, len(op.SelectionSet))
	seen := map[string]bool{}
	var walk func(ast.SelectionSet)
	walk = func(set ast.SelectionSet) {
		for _, sel := range set {
			switch sel := sel.(type) {
			case *ast.Field:
				if sel.ObjectDefinition != nil && included(sel.Directives, vars) {
					roots[sel.ObjectDefinition.Name+"."+sel.Name] = true
				}
			case *ast.InlineFragment:
				if included(sel.Directives, vars) {
					walk(sel.SelectionSet)
				}
			case *ast.FragmentSpread:
				if seen[sel.Name] || !included(sel.Directives, vars) {
					continue
				}
				seen[sel.Name] = true
				if f := doc.Fragments.ForName(sel.Name); f != nil {
					walk(f.SelectionSet)
				}
			}
		}
	}
	walk(op.SelectionSet)
	return roots
}
