package middleware

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/costguard/costguard/budget"
)

func TestSelectedOperation(t *testing.T) {
	for _, tc := range []struct {
		query, name, want string
	}{
		{`{ a }`, "", "query"},
		{`query { a }`, "", "query"},
		{`mutation M($a: In = {x: 1}) @d(v: {y: 2}) { a }`, "", "mutation"},
		{`mutation M { a }`, "M", "mutation"},
		{`subscription { a }`, "", "subscription"},
		{`fragment F on Mutation { a } mutation { ...F }`, "", "mutation"},
		{`query Q { a } mutation M { b }`, "M", "mutation"},
		{`query Q { a } mutation M { b }`, "Q", "query"},
		{`query Q { a } mutation M { b }`, "", ""},
		{`query Q { a } mutation M { b }`, "X", ""},
		{`query mutation { a }`, "mutation", "query"},
		{`mutation query { a }`, "", "mutation"},
		{`{ a(s: "mutation { b }") }`, "", "query"},
		{`mutation { a`, "", "mutation"},
		{`"unterminated`, "", ""},
	} {
		if got := selectedOperation(tc.query, tc.name); got != tc.want {
			t.Errorf("selectedOperation(%q, %q) = %q, want %q", tc.query, tc.name, got, tc.want)
		}
	}
}

// jsonString decodes what encoding/json decodes, with or without escapes.
func TestJSONString(t *testing.T) {
	for _, s := range []string{"", "{ viewer { login } }", `a "quoted" word`, "tab\tand\nnewline", `back\slash`, "ünïcødé ✓", "\u2028", "</script>"} {
		v, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if got := jsonString(v); got != s {
			t.Errorf("jsonString(%s) = %q, want %q", v, got, s)
		}
	}
}

// FuzzJSONString holds jsonString to encoding/json on any valid JSON
// string literal: escapes, surrogate pairs, lone surrogates, invalid UTF-8.
func FuzzJSONString(f *testing.F) {
	for _, s := range []string{`""`, `"{ a }"`, `"\"q\" \\ \/ \b\f\n\r\t"`, `"\u00e9\u2028"`, `"\ud83d\ude00"`, `"\ud83d"`, `"\ude00\ud83d x"`, `"\ud83d\u0041"`, "\"\xff\xfe ok\"", `"\ud83d\\"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, v []byte) {
		var want string
		v = bytes.TrimSpace(v) // jsonString gets the literal alone
		if len(v) < 2 || v[0] != '"' || !json.Valid(v) || json.Unmarshal(v, &want) != nil {
			return
		}
		if got := jsonString(v); got != want {
			t.Fatalf("jsonString(%q) = %q, want %q", v, got, want)
		}
	})
}

// TestRequestStateSizeClass pins the size of the per-request state within
// the heap's 896-byte size class: every GraphQL request allocates one, and
// the next class up is 1,024 bytes. A field that must be added may move it
// up; then lower this bound knowingly.
func TestRequestStateSizeClass(t *testing.T) {
	if n := unsafe.Sizeof(requestState{}); n > 896 {
		t.Errorf("requestState is %d bytes, over the 896-byte size class (booleans apart add padding)", n)
	}
}

// screenState is the state the screen reads of a request, under a
// limiter with default options, closed when tb ends.
func screenState(tb testing.TB) *requestState {
	l, err := New(Dependencies{}, Policy{
		Plans:         map[string]budget.Plan{"anon": {Burst: 1000, Rate: 1000, Per: time.Second}},
		AnonymousPlan: "anon",
	})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { l.Close() })
	return &requestState{set: l.current()}
}

// A body that repeats members gqlgen skips costs the screen no memory that
// grows with them, and one that repeats a request member is refused
// whatever its spelling: the walk keeps only the request's members, at
// most eight.
func TestEnvelopeKeepsOnlyRequestMembers(t *testing.T) {
	st := screenState(t)
	junk := []byte(`{"query":"{ a }",` + strings.Repeat(`"junk":1,`, 100_000) + `"variables":{"x":1}}`)
	if env, ref := scanEnvelope(junk, st); ref != nil || string(env.query) != `"{ a }"` || string(env.variables) != `{"x":1}` {
		t.Fatalf("junk members: %+v %+v", env, ref)
	}
	if allocs := testing.AllocsPerRun(5, func() { scanEnvelope(junk, st) }); allocs > 2 {
		t.Errorf("a body of 100,000 skipped members: %.0f allocations, want at most 2", allocs)
	}
	for _, body := range []string{
		`{"query":"{ a }"` + strings.Repeat(`,"Query":"{ a }"`, 9) + `}`,
		`{"query":"{ a }"` + strings.Repeat(`,"qu\u0065ry":"{ a }"`, 9) + `}`,
		`{"query":"{ a }","operationName":null,"variables":{},"extensions":{},"Query":"{ b }"}`,
	} {
		if _, ref := scanEnvelope([]byte(body), st); ref == nil || ref.code != CodeInvalidRequest {
			t.Errorf("%.60s…: %+v, want %s", body, ref, CodeInvalidRequest)
		}
	}
}

// BenchmarkEnvelopeDecode weighs the screen's walk of a JSON request body
// (scanEnvelope: one walk by jsontext.Members, member names only, values
// counted in place up to the bound) against decoding its envelope with
// encoding/json and counting the values of what it decoded, on a hostile body of 480,001 variable values
// (under the 1 MiB MaxBodyBytes) and on the README's query. The walk is what
// keeps the refusal of the hostile body at a few milliseconds and no
// allocation proportional to it:
//
//	go test -run '^$' -bench BenchmarkEnvelopeDecode -benchmem ./middleware/
func BenchmarkEnvelopeDecode(b *testing.B) {
	st := screenState(b)
	for _, body := range []struct{ name, json string }{
		{"hostile", `{"query":"{ __typename }","variables":{"x":[` + strings.Repeat("1,", 480_000) + `1]}}`},
		{"readme", `{"query":"query($login: String!) { user(login: $login) { repos(first: 10) { name issues(first: 5) { title } } } }","variables":{"login":"octocat"}}`},
	} {
		raw := []byte(body.json)
		b.Run(body.name+"/walk", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(raw)))
			for b.Loop() {
				scanEnvelope(raw, st)
			}
		})
		b.Run(body.name+"/encoding-json", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(raw)))
			for b.Loop() {
				var env struct {
					Query         string         `json:"query"`
					OperationName string         `json:"operationName"`
					Variables     map[string]any `json:"variables"`
					Extensions    map[string]any `json:"extensions"`
				}
				if err := json.Unmarshal(raw, &env); err != nil {
					b.Fatal(err)
				}
				budget := st.set.newJSONBudget()
				budget.measureDecoded("variables", env.Variables)
			}
		})
	}
}
