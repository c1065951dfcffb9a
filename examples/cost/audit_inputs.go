package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/costguard/costguard/budget"
)

// maxInputBytes bounds each file the audit reads.
const maxInputBytes = 64 << 20

// auditDocument is one document to price: its text, or why it could not
// be read. name is the file, or file#id for a manifest's entry
// (manifest is then the file; see nameEntries).
type auditDocument struct {
	name     string
	body     string
	err      error
	manifest string
}

// collectDocuments reads every input in order: a file of GraphQL, a
// manifest (a .json file: Apollo's persisted query manifest, or an object
// of id to document as Relay and the trusted-documents manifest write
// it), a glob, a directory (its .graphql and .gql files, recursively), or
// - for stdin. An input that names nothing, or a manifest that is not
// one, is an error.
func collectDocuments(inputs []string, stdin io.Reader) ([]auditDocument, error) {
	var docs []auditDocument
	for _, in := range inputs {
		if in == "-" {
			b, err := readBounded(stdin, "stdin")
			docs = append(docs, auditDocument{name: "stdin", body: string(b), err: err})
			continue
		}
		paths := []string{in}
		if strings.ContainsAny(in, "*?[") {
			var err error
			if paths, err = filepath.Glob(in); err != nil {
				return nil, fmt.Errorf("%s: %w", in, err)
			}
			if len(paths) == 0 {
				return nil, fmt.Errorf("%s: no file matches", in)
			}
		}
		for _, p := range paths {
			found, err := readInput(p)
			if err != nil {
				return nil, err
			}
			docs = append(docs, found...)
		}
	}
	return docs, nil
}

// readInput reads one path: a directory's GraphQL files, a manifest's
// entries, or one document.
func readInput(path string) ([]auditDocument, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if info.IsDir() {
		var docs []auditDocument
		err := filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if ext := filepath.Ext(p); !d.IsDir() && (ext == ".graphql" || ext == ".gql") {
				docs = append(docs, readDocument(p))
			}
			return nil
		})
		return docs, err
	}
	if filepath.Ext(path) == ".json" {
		return readManifest(path)
	}
	return []auditDocument{readDocument(path)}, nil
}

func readDocument(path string) auditDocument {
	b, err := readFileBounded(path)
	return auditDocument{name: path, body: string(b), err: err}
}

// readFileBounded reads the file at path, refusing one past maxInputBytes.
func readFileBounded(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readBounded(f, path)
}

func readBounded(r io.Reader, name string) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxInputBytes+1))
	if err == nil && len(b) > maxInputBytes {
		err = fmt.Errorf("%s is larger than %d bytes", name, maxInputBytes)
	}
	return b, err
}

// manifestEntry is one operation of Apollo's persisted query manifest
// (its name and type are read from the body).
type manifestEntry struct {
	ID   string `json:"id"`
	Body string `json:"body"`
}

// readManifest reads a manifest's documents, each named file#id.
func readManifest(path string) ([]auditDocument, error) {
	b, err := readFileBounded(path)
	if err != nil {
		return nil, err
	}
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(b, &probe); err != nil {
		return nil, fmt.Errorf("%s: not a manifest (a JSON object): %w", path, err)
	}
	var entries []manifestEntry
	if ops, ok := probe["operations"]; ok {
		if err := json.Unmarshal(ops, &entries); err != nil {
			return nil, fmt.Errorf("%s: operations: want [{\"id\", \"name\", \"type\", \"body\"}]: %w", path, err)
		}
	} else {
		for _, id := range slices.Sorted(maps.Keys(probe)) {
			var body string
			if err := json.Unmarshal(probe[id], &body); err != nil {
				return nil, fmt.Errorf("%s: entry %q: the document is not a string", path, id)
			}
			entries = append(entries, manifestEntry{ID: id, Body: body})
		}
	}
	docs := make([]auditDocument, len(entries))
	for i, e := range entries {
		docs[i] = auditDocument{name: path + "#" + e.ID, body: e.Body, manifest: path}
	}
	return docs, nil
}

// namedPlan is a budget plan and its name.
type namedPlan struct {
	name string
	budget.Plan
}

// planFlags collects -plan NAME={burst: B, rate: R, per: D}.
type planFlags []namedPlan

func (p *planFlags) String() string { return "" }

func (p *planFlags) Set(v string) error {
	name, spec, ok := strings.Cut(v, "=")
	if !ok || name == "" {
		return errors.New("want NAME={burst: B, rate: R, per: D}")
	}
	var pl budget.Plan
	if err := yaml.Unmarshal([]byte(spec), &pl); err != nil {
		return fmt.Errorf("plan %s: %w", name, err)
	}
	*p = append(*p, namedPlan{name: name, Plan: pl})
	return nil
}

// loadPlans returns the plans of -plans FILE (its plans: map, by name)
// then those of -plan, each checked.
func (f *auditFlags) loadPlans() ([]namedPlan, error) {
	var plans []namedPlan
	if f.plansFile != "" {
		b, err := os.ReadFile(f.plansFile)
		if err != nil {
			return nil, err
		}
		var file struct {
			Plans map[string]budget.Plan `yaml:"plans"`
		}
		if err := yaml.Unmarshal(b, &file); err != nil {
			return nil, fmt.Errorf("%s: %w", f.plansFile, err)
		}
		if len(file.Plans) == 0 {
			return nil, fmt.Errorf("%s: no plans: map", f.plansFile)
		}
		for _, name := range slices.Sorted(maps.Keys(file.Plans)) {
			plans = append(plans, namedPlan{name: name, Plan: file.Plans[name]})
		}
	}
	plans = append(plans, f.plans...)
	for _, p := range plans {
		if p.Burst <= 0 || p.Rate <= 0 || p.Per <= 0 {
			return nil, fmt.Errorf("plan %s: burst, rate and per must be above 0", p.name)
		}
	}
	return plans, nil
}

// planFit says whether a document's worst case fits one plan.
type planFit struct {
	Plan string `json:"plan"`
	// Fits says the worst case is within the plan's burst: one request
	// of it can pass.
	Fits bool `json:"fits"`
	// PerPeriod is how many such requests the plan's rate pays for every
	// Period, null when unbounded.
	PerPeriod *int64 `json:"perPeriod"`
	Period    string `json:"period"`
}

// fits compares worst-case points with each plan. A document priced 0
// counts as 1 point, the least the example server charges (min_cost).
func fits(points *int64, plans []namedPlan) []planFit {
	out := make([]planFit, 0, len(plans))
	for _, p := range plans {
		fit := planFit{Plan: p.name, Period: shortDuration(p.Per)}
		if points != nil {
			cost := max(*points, 1)
			perPeriod := p.Rate / cost
			fit.Fits, fit.PerPeriod = cost <= p.Burst, &perPeriod
		}
		out = append(out, fit)
	}
	return out
}

func (p planFit) describe() string {
	switch {
	case p.PerPeriod == nil:
		return "unbounded"
	case !p.Fits:
		return "over the burst"
	}
	return fmt.Sprintf("fits, %d per %s", *p.PerPeriod, p.Period)
}

// shortDuration writes d without its trailing zero units: "1h" for
// 1h0m0s, "1h30m" for 1h30m0s.
func shortDuration(d time.Duration) string {
	out := d.String()
	if strings.HasSuffix(out, "m0s") {
		out = strings.TrimSuffix(out, "0s")
	}
	if strings.HasSuffix(out, "h0m") {
		out = strings.TrimSuffix(out, "0m")
	}
	return out
}

// nameEntries renames the results of a manifest's entry file#name, after
// the operation it holds, when that name is its only operation's and no
// other entry of the manifest has it: a baseline then finds the operation
// again after its text, and so its id, changed. byDoc holds each
// document's results, in docs' order.
func nameEntries(docs []auditDocument, byDoc [][]auditResult) {
	sole := func(rs []auditResult) string {
		if len(rs) != 1 || rs[0].Operation == nil {
			return ""
		}
		return *rs[0].Operation
	}
	count := map[[2]string]int{}
	for i, d := range docs {
		if d.manifest != "" && sole(byDoc[i]) != "" {
			count[[2]string{d.manifest, sole(byDoc[i])}]++
		}
	}
	for i, d := range docs {
		name := sole(byDoc[i])
		if d.manifest != "" && name != "" && count[[2]string{d.manifest, name}] == 1 {
			byDoc[i][0].Document = d.manifest + "#" + name
		}
	}
}

// auditKey identifies an operation across two audits.
type auditKey struct{ document, operation string }

func keyOf(r auditResult) auditKey {
	k := auditKey{document: r.Document}
	if r.Operation != nil {
		k.operation = *r.Operation
	}
	return k
}

// readBaseline reads a previous -json output, one object per line.
func readBaseline(path string) (map[auditKey]auditResult, error) {
	b, err := readFileBounded(path)
	if err != nil {
		return nil, err
	}
	out := map[auditKey]auditResult{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, maxInputBytes)
	for line := 1; sc.Scan(); line++ {
		text := bytes.TrimSpace(sc.Bytes())
		if len(text) == 0 {
			continue
		}
		var r auditResult
		if err := json.Unmarshal(text, &r); err != nil || r.Document == "" {
			return nil, fmt.Errorf("%s:%d: not a line of cost audit -json: %v", path, line, err)
		}
		out[keyOf(r)] = r
	}
	return out, sc.Err()
}

// roseFrom says how r's worst case rose from its baseline, "" when it
// did not or has none.
func roseFrom(baseline map[auditKey]auditResult, r auditResult) string {
	old, ok := baseline[keyOf(r)]
	if !ok || old.Error != nil || old.MaxCost == nil || r.Error != nil {
		return "" // nothing priced to compare with, or an error reported already
	}
	switch {
	case r.MaxCost == nil:
		return fmt.Sprintf("worst case rose from %s to unbounded", old.MaxCost)
	case *r.MaxCost > *old.MaxCost:
		return fmt.Sprintf("worst case rose from %s to %s", old.MaxCost, r.MaxCost)
	}
	return ""
}
