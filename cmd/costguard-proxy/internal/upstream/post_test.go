package upstream

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/handler"
	"github.com/99designs/gqlgen/graphql/handler/extension"
	"github.com/99designs/gqlgen/graphql/handler/transport"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"
)

// encodeAnswer writes checked data as it is and is json.Marshal byte for
// byte when that data is compact: with errors, extensions and the
// incremental members or without, and with the characters json.Marshal
// escapes in strings.
func TestEncodeAnswerIsMarshal(t *testing.T) {
	hasNext := false
	data := []string{
		`{"user":{"login":"alice","repos":[{"name":"alpha"},{"name":"beta"}]}}`,
		`{"a":"<script>&amp;</script>","b":"\u003c","c":"line\u2028sep\u2029para","d":"é—’"}`,
		`null`,
		`{"n":[1,-2.5e3,0,true,false,null]}`,
		"{\"raw\":\"\u2028 \u2029 ends in E2\xe2\"}",
	}
	responses := []graphql.Response{
		{},
		{Errors: gqlerror.List{{Message: "boom <&>", Path: ast.Path{ast.PathName("user"), ast.PathIndex(0)},
			Locations: []gqlerror.Location{{Line: 1, Column: 3}}, Extensions: map[string]any{"code": "X", "data": nil}}}},
		{Errors: gqlerror.List{}},
		{Extensions: map[string]any{"cost": map[string]any{"requested": 56, "actual": json.Number("7")}, "a": "<"}},
		{Label: "deferred", Path: ast.Path{ast.PathName("x")}, HasNext: &hasNext, Extensions: map[string]any{"z": 1}},
		{Errors: gqlerror.List{{Message: "partial"}}, Extensions: map[string]any{"k": []any{"v"}}},
	}
	for _, d := range data {
		for _, resp := range responses {
			resp.Data = json.RawMessage(d)
			want, err := json.Marshal(&resp)
			if err != nil {
				t.Fatal(err)
			}
			got, err := encodeAnswer(&resp, resp.Data)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("encodeAnswer\n got %s\nwant %s", got, want)
			}
		}
	}
}

// Data encodeAnswer was not told is checked (another slice, even with
// the same bytes; none; an empty one) goes through json.Marshal, which
// checks and compacts it.
func TestEncodeAnswerUncheckedData(t *testing.T) {
	checked := []byte(`{"a": 1}`)
	for _, resp := range []*graphql.Response{
		nil,
		{Data: json.RawMessage(`{"a": 1}`)},
		{Data: checked[:3]},
		{Errors: gqlerror.List{{Message: "no data"}}},
	} {
		want, wantErr := json.Marshal(resp)
		got, err := encodeAnswer(resp, checked)
		if !bytes.Equal(got, want) || (err == nil) != (wantErr == nil) {
			t.Errorf("encodeAnswer = %s, %v; json.Marshal = %s, %v", got, err, want, wantErr)
		}
	}
	if got, _ := encodeAnswer(&graphql.Response{Data: checked}, checked); string(got) != `{"data":{"a": 1}}` {
		t.Errorf("checked data = %s: want it as it came", got)
	}
}

// answerMediaType chooses the answer's Content-Type as gqlgen's
// transport.POST does.
func TestAnswerMediaType(t *testing.T) {
	for accept, want := range map[string]string{
		"":                                  mediaJSON,
		"application/json":                  mediaJSON,
		"application/graphql-response+json": mediaGraphQLResponse,
		"application/graphql-response+json, application/json;q=0.9": mediaGraphQLResponse,
		"text/html, application/json":                               mediaJSON,
		"*/*":                                                       mediaGraphQLResponse,
		"application/*, application/json":                           mediaGraphQLResponse,
		"text/html":                                                 mediaGraphQLResponse,
		";;, application/json":                                      mediaJSON,
	} {
		if got := answerMediaType(accept); got != want {
			t.Errorf("Accept %q: %s, want %s", accept, got, want)
		}
	}
}

// Without a limiter in front, POST answers what reaches a transport as
// transport.POST does: bodies that do not decode, operations gqlgen
// refuses, and each kind of upstream answer. The bodies are the same
// bytes but where the upstream's data is not compact, which json.Marshal
// compacts: then they are the same JSON.
func TestPOSTAnswersAsTransportPOST(t *testing.T) {
	up := newFakeUpstream(t)
	var upstreamAnswer struct {
		status int
		body   string
	}
	up.answer = func(request) (int, string) { return upstreamAnswer.status, upstreamAnswer.body }
	ours, theirs := serveBare(t, up.URL, POST{}), serveBare(t, up.URL, transport.POST{})
	user := `{"query":"{ user(login: \"alice\") { login } }"}`
	for _, tc := range []struct {
		name, body string
		status     int    // the upstream's
		answer     string // the upstream's
		compact    bool   // whether the data is compact
	}{
		{"data", user, 200, `{"data":{"user":{"login":"alice"}}}`, true},
		{"data to escape", user, 200, `{"data":{"user":{"login":"<a&b>\u2028` + "\u2029\u2028\"}}}", true},
		{"data not compact", user, 200, "{\"data\": {\"user\" : {\"login\":\"a l i c e\"}\n}}", false},
		{"errors and data", user, 200, `{"errors":[{"message":"partial","path":["user"]}],"data":{"user":null},"extensions":{"trace":1}}`, true},
		{"a 401", user, 401, `{"errors":[{"message":"sign in","extensions":{"code":"UNAUTHENTICATED"}}]}`, true},
		{"unavailable", user, 503, `<html>down</html>`, true},
		{"not JSON", `{"query": "{ user`, 200, ``, true},
		{"not an object", `42`, 200, ``, true},
		{"a field of the wrong type", `{"query": 5}`, 200, ``, true},
		{"extensions of the wrong type", `{"query": "{ __typename }", "extensions": []}`, 200, ``, true},
		{"trailing bytes", `{"query": "{ __typename }"} trailing`, 200, `{"data":{"__typename":"Query"}}`, true},
		{"no operation", `{}`, 200, ``, true},
		{"validation error", `{"query": "{ nope }"}`, 200, ``, true},
		{"__typename", `{"query": "{ __typename }"}`, 200, `{"data":{"__typename":"Query"}}`, true},
	} {
		upstreamAnswer.status, upstreamAnswer.body = tc.status, tc.answer
		for _, accept := range []string{"", "application/graphql-response+json"} {
			got, want := postBare(t, ours.URL, tc.body, accept), postBare(t, theirs.URL, tc.body, accept)
			same := got.body == want.body
			if !tc.compact {
				var g, w any
				same = json.Unmarshal([]byte(got.body), &g) == nil && json.Unmarshal([]byte(want.body), &w) == nil &&
					mustMarshal(t, g) == mustMarshal(t, w)
				if !strings.Contains(got.body, `"user" : `) {
					t.Errorf("%s: %s: the upstream's data was encoded again, not written as it came", tc.name, got.body)
				}
			}
			if got.status != want.status || got.contentType != want.contentType || !same {
				t.Errorf("%s, Accept %q:\nPOST           %d %s %s\ntransport.POST %d %s %s",
					tc.name, accept, got.status, got.contentType, got.body, want.status, want.contentType, want.body)
			}
		}
	}
	// A body of null is where the two differ: transport.POST dereferences
	// the nil it decodes to and answers gqlgen's 422 for a panic; POST
	// reads no operation in it. (Behind the limiter, neither sees it: the
	// limiter refuses a body that is not an object.)
	if got := postBare(t, ours.URL, `null`, ""); got.status != http.StatusUnprocessableEntity || !strings.Contains(got.body, "no operation provided") {
		t.Errorf("null: %d %s, want 422 and no operation provided", got.status, got.body)
	}
}

// serveBare serves the forwarder to upstreamURL with gqlgen and post
// alone, inside Capture, as the proxy does but for the limiter.
func serveBare(t *testing.T, upstreamURL string, post graphql.Transport) *httptest.Server {
	t.Helper()
	schema, err := LoadSDL(testSDL)
	must(t, err)
	fwd, err := New(Config{Schema: schema, URL: upstreamURL})
	must(t, err)
	srv := handler.New(fwd.ExecutableSchema())
	srv.AddTransport(post)
	srv.Use(extension.Introspection{})
	s := httptest.NewServer(Capture(srv))
	t.Cleanup(s.Close)
	return s
}

// bareAnswer is an answer as it came.
type bareAnswer struct {
	status      int
	contentType string
	body        string
}

// postBare posts body to url with accept (none when "").
func postBare(t *testing.T, url, body, accept string) bareAnswer {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	must(t, err)
	req.Header.Set("Content-Type", "application/json")
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := http.DefaultClient.Do(req)
	must(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	must(t, err)
	return bareAnswer{resp.StatusCode, resp.Header.Get("Content-Type"), string(b)}
}

func mustMarshal(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	must(t, err)
	return string(b)
}

// BenchmarkEncodeAnswer is the writing of a 1,000-object answer (the
// shape of the proxy benchmarks' large query, about 40 KB, with an
// extensions.cost) by POST, which writes the checked data as it came,
// against json.Marshal, which transport.POST calls:
//
//	go test -run '^$' -bench EncodeAnswer ./cmd/costguard-proxy/internal/upstream
func BenchmarkEncodeAnswer(b *testing.B) {
	var data bytes.Buffer
	data.WriteByte('{')
	for i := range 40 {
		if i > 0 {
			data.WriteByte(',')
		}
		fmt.Fprintf(&data, `"l%d":[`, i)
		for j := range 25 {
			if j > 0 {
				data.WriteByte(',')
			}
			fmt.Fprintf(&data, `{"name":"label-%02d","color":"#%06x"}`, j+1, j*0x10101)
		}
		data.WriteByte(']')
	}
	data.WriteByte('}')
	resp := &graphql.Response{Data: data.Bytes(), Extensions: map[string]any{"cost": map[string]any{
		"requestedQueryCost": 400, "actualQueryCost": 1000,
		"throttleStatus": map[string]any{"maximumAvailable": 1000000000, "currentlyAvailable": 999999000, "restoreRate": 1000000000},
	}}}
	b.Run("POST", func(b *testing.B) {
		b.SetBytes(int64(data.Len()))
		for b.Loop() {
			if _, err := encodeAnswer(resp, resp.Data); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("json.Marshal", func(b *testing.B) {
		b.SetBytes(int64(data.Len()))
		for b.Loop() {
			if _, err := json.Marshal(resp); err != nil {
				b.Fatal(err)
			}
		}
	})
}
