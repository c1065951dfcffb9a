// Package complexity prices GraphQL operations statically, before any
// resolver runs, under the IBM GraphQL Cost Directives (@cost, @listSize),
// and enforces the structural caps (depth, breadth, nodes, cost, aliases,
// root fields) that reject absurd operations first.
//
// It only computes: a gqlparser schema and a validated operation go in, a
// Report (or an *Error) comes out. It knows nothing about HTTP, gqlgen or
// budgets; package budget debits Report.Points.
//
// # Use
//
//	schema, err := complexity.LoadSchema(&ast.Source{Input: sdl}) // supplies @cost/@listSize if undeclared
//	a, err := complexity.New(schema, complexity.WithMaxCost(5000), complexity.WithMaxDepth(10))
//	report, err := a.AnalyzeOperation(rc.Doc, rc.Operation, rc.Variables) // gqlgen's OperationContext
//	var ce *complexity.Error
//	if errors.As(err, &ce) { /* ce.Code is MAX_COST_EXCEEDED, …; ce.GQLError() for the client */ }
//	explained, err := a.Explain(rc.Doc, rc.Operation, rc.Variables) // the same, with Report.Fields
//
// An Analyzer is built once per schema (New validates the directives and
// the options) and is safe for concurrent use.
//
// # The explain view
//
// Report.Fields lists every priced field with its path, multiplier and
// cost, and for an interface or union each member's cost. It is built only
// when asked: Analyzer.Explain (or Plan.Explain) prices with it, at most
// DefaultBreakdownLimit entries; an Analyzer built with
// WithBreakdownLimit(n) builds it on every call, at most n entries, and
// Explain then lists n too. AnalyzeOperation with the defaults returns
// the totals with Fields empty. Either way WithBreakdownBytes caps the
// bytes of the paths, and FieldsTruncated says the list stopped.
//
// # The cost model
//
//   - typeWeight(T) is @cost(weight) on T, else 1 for object, interface,
//     union and input object types and 0 for scalars and enums.
//   - fieldWeight(f) is @cost(weight) on the field definition (for a field
//     selected through an interface, the concrete type's definition), else 0.
//   - argCost(f) sums, over arguments with a value (literal, variable or
//     schema default), valueCost: for an input object, the argument's or
//     input field's own @cost if present, else the input type's weight,
//     plus the valueCost of each field (missing fields take their schema
//     defaults, as coercion fills them in, defaults inside defaults
//     included); for a list, the sum over its elements; for a scalar or
//     enum, the own @cost if present, else the type's weight. A null costs
//     nothing (WithNullArgumentsCharged: the weight of its place).
//   - own(f) = max(0, fieldWeight + argCost): a negative weight discounts
//     the field itself, not what it returns (WithSubtreeDiscounts: own(f)
//     = fieldWeight + argCost, which may discount the rest).
//   - A composite field costs max(0, own(f) + n × (typeWeight + Σ
//     cost(children))); a leaf field costs max(0, own(f) + n ×
//     typeWeight).
//   - n is 1 for a non-list field. For a list field it is (a) the size the
//     parent hands down through @listSize(sizedFields:) (dotted paths such
//     as "meta.tags", or Apollo's selections such as "meta { tags }",
//     reach deeper), else (b) the largest non-null slicing argument,
//     coerced (a list-valued one counts its elements), else (c)
//     @listSize(assumedSize:) or WithAssumedSizes, else (d) the default
//     list size (DefaultListSize, WithDefaultListSize). A list of lists is
//     sized once.
//     (c) and (d) are assumptions: nothing in the request bounds such a
//     list, and the actual cost counts what it returned.
//   - A slicing argument may be a path into an input-object argument
//     ("input.pagination.first", "filter.per_page"), each segment checked
//     by New; its value is read as coercion fills it in, input fields left
//     out taking their defaults, an argument left out its default value.
//   - A negative slicing argument (an app's "all") asks for every item: it
//     is read as the field's assumedSize, its declared maximum, held to
//     WithMaxBreadth; without one it is refused with MAX_BREADTH_EXCEEDED.
//   - With slicingArguments declared, requireOneSlicingArgument defaults to
//     true: exactly one of them must be non-null (schema defaults count).
//   - Several @listSize on one field are each read on their own; the
//     largest size wins and their sizedFields add up.
//   - @cost and @listSize may be imported under other names, or used under
//     their namespaced names (@cost__listSize, @federation__cost), through
//     @link to the cost spec v0.1 or federation v2.9 and later; they price
//     as the originals. A cost directive that cannot be read (another
//     version of the cost spec, an argument it does not define) fails New,
//     and LoadSchema, with ErrInvalidSchema.
//   - Fields without @listSize follow the list-size conventions below.
//   - An interface or union costs, in place of typeWeight + Σ children, the
//     maximum over its possible object types of that type's weight plus the
//     fields that apply to it; depth and nodes take their own maxima.
//   - Fields are collected as the executor collects them: @skip/@include
//     applied (with variables), fragments applied by type condition, fields
//     sharing a response key merged and counted once, aliases counted apart.
//   - Only the selected operation is priced: base + Σ cost(root fields).
//     Mutations start from 10 (WithMutationBaseCost), queries and
//     subscriptions from 0; the root type's own weight is not counted.
//   - Introspection: __typename, __schema, __type and the fields of the
//     introspection types cost 0 (WithFreeIntrospection, on by default;
//     off, they are priced against the introspection types). Each
//     response key selecting __schema or __type then adds
//     WithIntrospectionCost (default 0); __typename never does. Free or
//     not, they count toward depth, nodes, aliases and root fields and are
//     held to every limit. Report.Introspection says whether __schema or
//     __type is selected.
//   - depth is the longest chain of nested fields, root fields at 1;
//     fragments add no level. nodes is the sum over composite list fields of
//     n × the n of every enclosing list field (GitHub's node count).
//
// # List-size conventions
//
// A field without @listSize is sized by conventions, so that common
// schemas price with no directive. Each is on by default and has an option
// to turn it off; the slicing arguments they name are never required (no
// SLICING_ARGUMENT_REQUIRED), take their schema default when absent, and
// are held to WithMaxBreadth. A @listSize directive replaces them all.
//
//   - first and last are slicing arguments (WithFirstLastConvention).
//   - First, last and count-named input fields of a count's type (not
//     max…) inside input-object arguments are slicing arguments as those
//     arguments would be, up to two input objects deep: filter.per_page,
//     input.pagination.first.
//   - A field returning a type named …Connection hands its size to that
//     type's edges and nodes fields (WithConnectionConvention).
//   - Count-named arguments (WithCountArgumentConvention): an argument of
//     type Int, or of a custom scalar whose name contains "Int"
//     (PositiveInt, Int64, BigInt), whose name, lowercased without
//     underscores, is limit, count, top, take, size, batchsize, pagesize
//     or perpage or starts with max, is a slicing argument of a list
//     field (Hasura's limit, GitHub's maxRepositories) and of a field
//     returning a …Connection. A non-list field
//     with first, last or such an argument that returns an object or
//     interface, not a …Connection, with exactly one list field, itself
//     without slicing arguments, hands its size to that field: Hasura's
//     X_aggregate(limit:) { nodes }.
//   - Key lists (WithKeyListConvention): a list-typed argument named
//     representations, ids or keys sizes a list field by its length:
//     federation's _entities(representations:), nodes(ids:).
//   - Mutation lists (WithMutationListConvention): on the mutation root,
//     list-typed arguments size a list result by the longest; a non-list
//     result hands that size to each of its list fields that has no
//     slicing arguments: Hasura's insert_X(objects:) { returning }.
//
// The conventions are resolved once, by New; a request's price reads
// their arguments as it reads first.
//
// # Field counts
//
// WithCountedFields names schema coordinates ("Mutation.createIssue") whose
// executions a caller limits on their own. Report.FieldCounts says, for
// each one selected, how many times it would execute and the response path
// of its first selection: each response key once per parent object
// (fields the executor merges count once, aliases apart), times the priced
// size n of every enclosing list, as nodes are counted. Under an interface
// or union the count is the largest over the possible types, per
// coordinate, as depth and nodes are. Counting happens in the pricing
// walk, memoised sets included; without the option it costs nothing.
//
// # Actual cost
//
// After execution, Analyzer.ActualCost prices the operation again from the
// response's data (raw JSON): the same walk and the same formulas, with
// each list's size replaced by the items it returned, each object priced
// from its own fields. A null or missing value costs its field's own
// weight and arguments only; an interface or union object is priced as
// the member a __typename names (only under a key that really selects
// __typename), else as the costliest member whose selections are exactly
// its keys; introspection fields keep their requested price; a null data
// costs the base. A list costs the items it returned, even past the size
// it was priced at; a field none of whose lists overran costs at most its
// requested price. So below Report.Points, requested − actual is what a
// budget can give back; above it (a list overran an assumed size),
// actual − requested ran unpaid and a budget debits it after the
// response. The response is read in one pass without decoding it, and a
// call allocates nothing.
//
// # Compiled plans
//
// The price of an operation depends on the document and the variables
// only, so Analyzer.Compile prepares it once per (document, operation) and
// Plan.Evaluate prices each request's variables with it, returning exactly
// what AnalyzeOperation returns (reports deep-equal, errors with the same
// code, message, location and path: a test runs every golden case both
// ways, another random variable values, and FuzzPlanMatchesScratch
// arbitrary operations).
//
//   - Constant: a price that reads no variable (variables only in free
//     arguments, such as user(login: $login), count as none) is computed
//     at Compile, refusals that depend on the document alone (aliases,
//     root fields, depth, a literal breadth) included. Evaluate returns
//     the plan's own Report or error: a pointer, no work, no allocation.
//     The result is read-only for every caller.
//   - Conditions: the variables read by @skip and @include (up to
//     MaxPlanConditions) select one sub-plan per assignment of true and
//     false, each compiled as below when a request first needs it (Compile
//     compiles the all-false one), so a new document costs one or two
//     compilations, not one per assignment, before anything is charged.
//   - Evaluated: when slicing arguments (@listSize slicingArguments or a
//     convention's, the sizes handed to sizedFields and by a convention)
//     or priced arguments read variables,
//     the sub-plan is a tree of the fields already collected (fragments
//     applied, merged, typed; a fragment spread in many places is one
//     shared node) holding each field's weight, its constant sizes and
//     argument costs, and which of them to read from the variables.
//     Evaluate walks the tree, memoising shared nodes, without touching
//     the document, pricing each field with the functions the walk behind
//     AnalyzeOperation calls, in the same order: each rule is written
//     once.
//   - From scratch: Evaluate calls AnalyzeOperation when the conditions
//     read more than MaxPlanConditions variables, a condition is not a
//     Boolean, a value is refused (negative or above the maximum breadth,
//     not coercible, a required slicing argument missing: rare, and the
//     error must come out as the walk finds it), a document limit is met
//     after a variable was read, or a breakdown (WithBreakdownLimit > 0)
//     is asked of a price that reads variables. Plan.Explain always
//     prices from scratch.
//
// Plan.ActualCost settles an executed request through the same plan, with
// the answers of Analyzer.ActualCost; where the price reads no variable
// but conditions, the tree a response is read against is built once and
// kept, within what Plan.Size charges for it.
//
// A Plan keeps the document and operation it prices and, beside them,
// about Plan.Size bytes: a constant plan its Report (and, with
// WithBreakdownLimit, its breakdown), an evaluated one a node per
// collected field. A cache should bound plans by
// count and by Size, as gqlgen's query cache bounds documents.
//
// # Numbers
//
// Costs are Cost values: fixed point in thousandths of a point, so
// fractional weights ("2.5") are exact and pricing is deterministic. All
// arithmetic saturates (costs at ±CostCeiling, counts at MaxInt64) and
// never wraps. Report.Points is the cost rounded up to whole points.
//
// # Coercion
//
// Every value the analyzer reads (slicing arguments, @skip/@include
// conditions, the values argCost prices, nested in lists and input objects)
// is coerced as the executor will coerce it, after gqlparser's
// VariableValues and gqlgen's graphql.UnmarshalInt, UnmarshalFloat…: the
// Int "500" is 500, for pricing, MaxBreadth and the negative check alike. A
// value the executor would refuse ("abc", "1e3" or 1.5 for an Int, an
// @include condition that is not a Boolean) is refused with
// INVALID_ARGUMENT_VALUE. Custom scalars are never refused; as slicing
// arguments they are sized by a number they hold, if any.
//
// # Limits
//
// Each limit is optional (0 = none) and fails with an *Error carrying a
// stable code: MAX_DEPTH_EXCEEDED, MAX_BREADTH_EXCEEDED (a slicing argument
// above the cap, or negative on a field without assumedSize),
// MAX_NODES_EXCEEDED, MAX_COST_EXCEEDED,
// SLICING_ARGUMENT_REQUIRED, MAX_ALIASES_EXCEEDED and
// MAX_ROOT_FIELDS_EXCEEDED; a value that does not coerce fails with
// INVALID_ARGUMENT_VALUE whatever the options. Aliases and root fields are
// checked before pricing, depth, breadth and argument values during the walk
// (so a 1,000-level document stops at the depth cap), nodes and cost on the
// totals.
//
// # Performance
//
// Pricing is linear in the size of the document: each fragment spread is
// checked in constant time, and the price of a selection
// is memoised per (merged fields, concrete type, handed-down size), so a
// fragment reached through many spreads is priced once per context. With
// the defaults AnalyzeOperation keeps nothing of the walk but the totals:
// it allocates the Report and nothing per field. An interface or union is
// priced for each possible type, but with the totals alone the members
// that price alike (the same type conditions of the selection apply, the
// same weight, and each collected field has the same weight, type and
// assumed size and no argument or sized path to tell them apart) share one
// walk: GitHub's nodes(ids:) has 249 possible types, of which a selection
// with inline fragments on Actor, Repository, Issue and Comment walks six.
// Argument defaults are priced once by New. The explain view
// (Report.Fields) keeps every priced field and expands shared subtrees, so
// it costs what it lists (on GitHub's documented queries, two to four
// times the totals alone); it is built only when asked (Explain,
// WithBreakdownLimit) and capped, in entries and in the bytes of their
// paths (WithBreakdownBytes). BenchmarkGitHubSchema measures both, with
// the defaults, against gqlgen's complexity.Calculate on GitHub's public
// schema.
package complexity
