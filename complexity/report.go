package complexity

import "slices"

// Totals are an operation's three headline numbers.
type Totals struct {
	// Cost is the operation's price in points (exact, possibly fractional).
	Cost Cost `json:"cost"`
	// Depth is the longest chain of nested fields, root fields at 1.
	Depth int `json:"depth"`
	// Nodes is the number of objects the operation may return through
	// lists (GitHub's node count).
	Nodes int64 `json:"nodes"`
}

// Report is the price of one operation.
type Report struct {
	// Operation is the operation's name, "" when anonymous.
	Operation string `json:"operation,omitempty"`
	// OperationType is "query", "mutation" or "subscription".
	OperationType string `json:"operationType"`
	Totals
	// Points is Cost rounded up to whole points: what a budget debits.
	Points int64 `json:"points"`
	// Fields is the explain view: every priced field in document order,
	// depth first, at most the breakdown limit of entries. It is built only
	// when asked, by Analyzer.Explain or Plan.Explain, or on every call by
	// an Analyzer built with WithBreakdownLimit; otherwise it is empty. A
	// fragment reached many times appears once per place it is reached.
	Fields []FieldCost `json:"fields"`
	// FieldsTruncated is set when Fields stopped at the breakdown limit, or
	// at the cap on the bytes of its paths (WithBreakdownBytes).
	FieldsTruncated bool `json:"fieldsTruncated,omitempty"`
	// Introspection is set when the operation selects __schema or __type
	// anywhere (after @skip/@include), so a caller can refuse
	// introspection per plan. __typename alone does not set it. (Last, beside
	// FieldsTruncated, so the Report stays in a smaller size class.)
	Introspection bool `json:"introspection,omitempty"`
	// FieldCounts counts the fields named by WithCountedFields: one entry
	// per coordinate selected with a count above zero, in the order they
	// were given. Nil without WithCountedFields, or when none is selected.
	FieldCounts []FieldCount `json:"fieldCounts,omitempty"`
}

// FieldCost is one line of the explain view.
type FieldCost struct {
	// Path is the response path, response keys (aliases) joined by dots.
	Path string `json:"path"`
	// Field is the schema coordinate priced, "Type.field". Under an
	// interface or union it names the concrete type that priced highest
	// (see Members).
	Field string `json:"field"`
	// Depth is the field's level, root fields at 1.
	Depth int `json:"depth"`
	// Multiplier is n: the list size the field's value is multiplied by (1
	// for a non-list field).
	Multiplier int64 `json:"multiplier"`
	// Cost is the field's cost including its sub-fields, for one instance
	// of its parent.
	Cost Cost `json:"cost"`
	// Members explains a field returning an interface or union with
	// several possible types: each type, by name, with the cost of one
	// object of it (its weight plus the fields selected on it, what n
	// multiplies). The first of the most expensive is the Winner, whose
	// fields the entries below this one list. Empty for other fields.
	Members []MemberCost `json:"members,omitempty"`
}

// MemberCost is one possible type of an abstract field in the explain view.
type MemberCost struct {
	// Type is the object type's name.
	Type string `json:"type"`
	// Cost is one object of Type: its weight plus its selected fields.
	Cost Cost `json:"cost"`
	// Winner marks the member the field is priced as.
	Winner bool `json:"winner,omitempty"`
}

// breakdown expands the priced tree into at most limit FieldCost entries
// whose paths hold at most maxBytes bytes together (0: no cap). Shared
// (memoised) subtrees are expanded at each place they occur, and every
// path repeats its ancestors' keys, so the two caps are what keep this
// bounded.
func (w *walker) breakdown(root []pricedField, limit, maxBytes int64, truncated *bool) []FieldCost {
	out := make([]FieldCost, 0, limit)
	if limit == 0 {
		return out
	}
	path := make([]byte, 0, 64) // the dotted response path, grown and cut per level
	var pathBytes int64         // the paths copied into out so far
	// Every entry's path goes into all, back to back, entry i's ending at
	// ends[i]: one string is made of them at the end and each Path is a
	// piece of it, rather than one allocation per entry. Both are the
	// walker's, kept from one analysis to the next.
	all, ends := w.paths[:0], w.pathEnds[:0]
	defer func() { w.paths, w.pathEnds = all[:0], ends[:0] }()
	var walk func(fields []pricedField, depth int) bool
	walk = func(fields []pricedField, depth int) bool {
		for i := range fields {
			pf := &fields[i]
			if int64(len(out)) == limit {
				*truncated = true
				return false
			}
			mark := len(path)
			if mark > 0 {
				path = append(path, '.')
			}
			path = append(path, pf.key...)
			if pathBytes += int64(len(path)); maxBytes > 0 && pathBytes > maxBytes {
				*truncated = true
				return false
			}
			all = append(all, path...)
			ends = append(ends, len(all))
			fc := FieldCost{
				Field:      pf.info.coord,
				Depth:      depth,
				Multiplier: pf.n,
				Cost:       pf.cost,
			}
			if pf.children != nil && pf.children.members != nil && pf.children.members.costs != nil {
				// A memoised set is expanded at every place it is reached:
				// each entry gets its own copy.
				fc.Members = slices.Clone(pf.children.members.costs)
			}
			out = append(out, fc)
			if pf.children != nil && !walk(pf.children.fields, depth+1) {
				return false
			}
			path = path[:mark]
		}
		return true
	}
	walk(root, 1)
	paths, start := string(all), 0
	for i, end := range ends {
		out[i].Path, start = paths[start:end], end
	}
	return out
}
