package complexity

import (
	"fmt"
	"math"
)

// Defaults applied by New.
const (
	// DefaultListSize is the size assumed for a list field that has no
	// slicing argument, no assumedSize and no size handed down by its
	// parent. Ten keeps an unbounded list from looking free while staying
	// below typical page sizes.
	DefaultListSize = 10
	// DefaultMutationBaseCost is the cost of running any mutation, before
	// its fields are priced.
	DefaultMutationBaseCost = 10
	// DefaultBreakdownLimit caps Report.Fields when a breakdown is asked
	// without a limit of its own (Analyzer.Explain on an Analyzer built
	// without WithBreakdownLimit), so an explain view stays bounded even
	// when a small document expands to millions of fields. New prices
	// without a breakdown.
	DefaultBreakdownLimit = 1000
	// DefaultBreakdownBytes caps the bytes of the paths in Report.Fields,
	// summed: each path repeats every enclosing response key, so without
	// it one long alias above a thousand fields would be copied a thousand
	// times.
	DefaultBreakdownBytes = 1 << 20
	// AbsoluteMaxDepth bounds nesting even when no maximum depth is set, so
	// hostile documents cannot exhaust the stack. Exceeding it is reported
	// as MAX_DEPTH_EXCEEDED.
	AbsoluteMaxDepth = 10000
)

// Option configures an Analyzer. Options are checked by New; a bad value
// fails construction with ErrInvalidOption.
type Option func(*config) error

type config struct {
	defaultListSize   int64
	mutationBaseCost  Cost
	maxDepth          int
	maxBreadth        int64
	maxNodes          int64
	maxCost           Cost
	hasMaxCost        bool
	maxAliases        int
	maxRootFields     int
	firstLast         bool
	connections       bool
	countArguments    bool
	keyLists          bool
	mutationLists     bool
	freeIntrospection bool
	introspectionCost Cost
	subtreeDiscounts  bool // WithSubtreeDiscounts
	chargeNulls       bool // WithNullArgumentsCharged
	breakdownLimit    int
	breakdownBytes    int64
	counted           []string          // WithCountedFields
	assumedSizes      map[string]int64  // WithAssumedSizes
	recorder          *ListSizeRecorder // WithListSizeRecorder
}

func defaultConfig() config {
	return config{
		defaultListSize:   DefaultListSize,
		mutationBaseCost:  DefaultMutationBaseCost * CostScale,
		firstLast:         true,
		connections:       true,
		countArguments:    true,
		keyLists:          true,
		mutationLists:     true,
		freeIntrospection: true,
		breakdownBytes:    DefaultBreakdownBytes,
	}
}

func nonNegative(name string, n int64) error {
	if n < 0 {
		return fmt.Errorf("%w: %s must not be negative, got %d", ErrInvalidOption, name, n)
	}
	return nil
}

func finiteNonNegative(name string, f float64) error {
	if math.IsNaN(f) || math.IsInf(f, 0) || f < 0 {
		return fmt.Errorf("%w: %s must be a finite number ≥ 0, got %v", ErrInvalidOption, name, f)
	}
	return nil
}

// WithDefaultListSize sets the size assumed for list fields whose size is
// otherwise unknown (default DefaultListSize).
func WithDefaultListSize(n int) Option {
	return func(c *config) error {
		c.defaultListSize = int64(n)
		return nonNegative("default list size", int64(n))
	}
}

// WithMutationBaseCost sets the cost every mutation starts from (default
// DefaultMutationBaseCost). Queries and subscriptions start from 0.
func WithMutationBaseCost(points float64) Option {
	return func(c *config) error {
		if err := finiteNonNegative("mutation base cost", points); err != nil {
			return err
		}
		c.mutationBaseCost = costFromFloat(points)
		return nil
	}
}

// WithMaxDepth rejects operations nested deeper than n fields, root fields
// at depth 1, with MAX_DEPTH_EXCEEDED. 0 means no limit (AbsoluteMaxDepth
// still applies).
func WithMaxDepth(n int) Option {
	return func(c *config) error {
		c.maxDepth = n
		return nonNegative("max depth", int64(n))
	}
}

// WithMaxBreadth rejects any slicing argument (one named by @listSize, or
// one by convention: first, last, a count-named argument, a key list, a
// mutation's list argument) above n with MAX_BREADTH_EXCEEDED; a
// list-valued slicing argument is measured by its length. 0 means no limit. A negative
// slicing argument (every item) is held to the limit as the field's
// @listSize(assumedSize:); on a field without one it is rejected with the
// same code whatever the limit.
func WithMaxBreadth(n int) Option {
	return func(c *config) error {
		c.maxBreadth = int64(n)
		return nonNegative("max breadth", int64(n))
	}
}

// WithMaxNodes rejects operations that may return more than n objects
// through lists (GitHub's node count) with MAX_NODES_EXCEEDED. 0 means no
// limit.
func WithMaxNodes(n int64) Option {
	return func(c *config) error {
		c.maxNodes = n
		return nonNegative("max nodes", n)
	}
}

// WithMaxCost rejects operations costing more than points with
// MAX_COST_EXCEEDED. 0 means no limit.
func WithMaxCost(points float64) Option {
	return func(c *config) error {
		if err := finiteNonNegative("max cost", points); err != nil {
			return err
		}
		c.maxCost = costFromFloat(points)
		c.hasMaxCost = c.maxCost > 0
		return nil
	}
}

// WithMaxAliases rejects operations whose document (the operation and the
// fragments it uses, each counted once) contains more than n aliased fields,
// introspection fields included, with MAX_ALIASES_EXCEEDED. 0 means no
// limit.
func WithMaxAliases(n int) Option {
	return func(c *config) error {
		c.maxAliases = n
		return nonNegative("max aliases", int64(n))
	}
}

// WithMaxRootFields rejects operations that select more than n root fields
// (response keys after @skip/@include and merging; __typename, __schema and
// __type count like any other) with MAX_ROOT_FIELDS_EXCEEDED. 0 means no
// limit.
func WithMaxRootFields(n int) Option {
	return func(c *config) error {
		c.maxRootFields = n
		return nonNegative("max root fields", int64(n))
	}
}

// WithFirstLastConvention sets whether arguments named first and last are
// slicing arguments on fields without @listSize (default on), and input
// fields so named inside input-object arguments, up to two input objects
// deep (input.pagination.first). They are never required.
func WithFirstLastConvention(on bool) Option {
	return func(c *config) error {
		c.firstLast = on
		return nil
	}
}

// WithConnectionConvention sets whether a field without @listSize that
// returns a type named …Connection hands its size to the edges and nodes
// fields of that type (default on).
func WithConnectionConvention(on bool) Option {
	return func(c *config) error {
		c.connections = on
		return nil
	}
}

// WithCountArgumentConvention sets whether count-named arguments size lists
// on fields without @listSize, as first and last do (default on).
//
// An argument is count-named when its type is Int, or a custom scalar
// whose name contains "Int" (PositiveInt, NonNegativeInt, Int64, BigInt),
// not a list, and its name, lowercased with underscores removed, is limit,
// count, top, take, size, batchsize, pagesize or perpage, or starts with
// max (maxRepositories, max_results). Such an argument is a slicing
// argument of a list field: never required, its schema default applies
// when it is absent, and WithMaxBreadth holds it. So is an input field
// named like a count (not max…, which in a filter bounds a value) inside
// an input-object argument, up to two input objects deep:
// findScenes(filter: {per_page: 40}), the input's default applying when
// the object leaves it out.
//
// The option also governs single-list wrappers: a non-list field with
// slicing arguments by convention (count-named, first or last) that
// returns an object or interface type not named …Connection, whose one
// list field has no slicing arguments of its own, hands its size to that
// field, as a …Connection hands it to edges and nodes. Hasura's
// X_aggregate(limit: 5) { nodes { … } } prices nodes at 5. A count-named
// argument of a non-list field counts only where the field hands its size
// down (to a wrapper's list, a …Connection's edges and nodes, or a
// mutation payload's lists).
//
// A filter named like a count (maxPrice: Int) is read as a size too: give
// such a field @listSize, which replaces every convention.
func WithCountArgumentConvention(on bool) Option {
	return func(c *config) error {
		c.countArguments = on
		return nil
	}
}

// WithKeyListConvention sets whether a list-typed argument named
// representations, ids or keys sizes a list field without @listSize by its
// length (default on): federation's _entities(representations:) and
// nodes(ids:) return one item per key. A single value given for the list
// is a list of one, as the executor coerces it. Never required;
// WithMaxBreadth holds the length.
func WithKeyListConvention(on bool) Option {
	return func(c *config) error {
		c.keyLists = on
		return nil
	}
}

// WithMutationListConvention sets whether the list-typed arguments of a
// mutation root field without @listSize size what it returns (default
// on): they are slicing arguments, never required, so a list result is
// sized by the longest, and a non-list result (an object or interface)
// hands that size to each of its own list fields that has no slicing
// arguments. Hasura's insert_X(objects: [3 rows]) { returning { id } }
// prices returning at 3. WithMaxBreadth holds the length.
func WithMutationListConvention(on bool) Option {
	return func(c *config) error {
		c.mutationLists = on
		return nil
	}
}

// WithFreeIntrospection sets whether __typename, __schema, __type and the
// fields beneath them cost nothing (default on). When off they are priced
// like any other field, against the introspection types. Either way they
// count toward depth, nodes, aliases and root fields, and are held to every
// limit; WithIntrospectionCost is charged on top.
func WithFreeIntrospection(on bool) Option {
	return func(c *config) error {
		c.freeIntrospection = on
		return nil
	}
}

// WithIntrospectionCost charges points for each selection of __schema or
// __type after an operation's first, per response key (5,000 aliases of
// __schema pay 4,999 × points), on top of the fields beneath it (default
// 0): the one schema fetch a tool such as GraphiQL sends pays nothing for
// it. __typename never pays it. Report.Introspection says whether an
// operation selects either field.
func WithIntrospectionCost(points float64) Option {
	return func(c *config) error {
		if err := finiteNonNegative("introspection cost", points); err != nil {
			return err
		}
		c.introspectionCost = costFromFloat(points)
		return nil
	}
}

// WithSubtreeDiscounts sets whether a negative own cost discounts what its
// field returns (default off). A field's own cost is its weight plus its
// arguments' (argCost), and a negative argument or field weight can make
// it negative. Off, the own cost is clamped at 0 by itself, as the IBM
// spec, Apollo Router and the lean model of graphql-static-analysis price
// it: a −50 argument on a list assumed at 100 costs 100, the list's items
// and everything beneath them kept. On, the clamp applies to the field's
// whole price instead, so the same argument discounts the items and the
// field costs 50. Either way no field costs less than 0.
func WithSubtreeDiscounts(on bool) Option {
	return func(c *config) error {
		c.subtreeDiscounts = on
		return nil
	}
}

// WithNullArgumentsCharged sets whether an explicit null (an argument, an
// input field or a list element given as null, by a literal, a variable or
// a schema default) costs the weight of its place, its own @cost else its
// type's weight, as the lean model of graphql-static-analysis charges it
// (default off: a null costs nothing, as Apollo Router prices it, since the
// resolver receives no value to work on). An argument left out, or a
// variable not sent, is absent rather than null and costs nothing either
// way.
func WithNullArgumentsCharged(on bool) Option {
	return func(c *config) error {
		c.chargeNulls = on
		return nil
	}
}

// WithBreakdownLimit turns the breakdown (Report.Fields, the explain view)
// on for every call, capped at n entries: AnalyzeOperation, Analyze and
// Plan.Evaluate list the priced fields, and Explain caps at n too. The
// default, 0, prices totals only (Fields empty), which is cheaper on the
// request path; Explain then caps at DefaultBreakdownLimit.
func WithBreakdownLimit(n int) Option {
	return func(c *config) error {
		c.breakdownLimit = n
		return nonNegative("breakdown limit", int64(n))
	}
}

// WithBreakdownBytes caps the bytes of the paths in Report.Fields, summed
// (default DefaultBreakdownBytes), wherever a breakdown is built (Explain,
// WithBreakdownLimit): it stops, with FieldsTruncated, before the entry
// that would pass n. 0 lifts the cap, leaving only the breakdown limit.
func WithBreakdownBytes(n int64) Option {
	return func(c *config) error {
		c.breakdownBytes = n
		return nonNegative("breakdown bytes", n)
	}
}
