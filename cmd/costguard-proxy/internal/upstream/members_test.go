package upstream

import (
	"bytes"
	"encoding/json"
	"testing"
)

// responseMembers finds what encoding/json decodes into a map of raw
// members: the same values, or an error on the same inputs.
func FuzzResponseMembers(f *testing.F) {
	for _, s := range []string{
		`{"data":{"a":1}}`,
		` { "errors" : [ {"message":"x}]\"{"} ] , "data" : null } `,
		`{"data":{"s":"a\"}b\\","n":[1,{"x":[]}],"t":true},"extensions":{"cost":{"requestedQueryCost":3}}}`,
		`{"d\u0061ta":[1,2],"data":"last wins"}`,
		`{"extensions":-1.5e3,"other":{"data":1}}`,
		`{}`, `[]`, `"data"`, `{"data":1,}`, `{"data" 1}`, ``, `{"data":"\u00e9\ud83d\ude00"}`,
		"{\"data\":\"\xff\"}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		data, errs, ext, err := responseMembers(raw)
		var members map[string]json.RawMessage
		want := json.Unmarshal(raw, &members)
		if (err != nil) != (want != nil) {
			t.Fatalf("%q: error %v, encoding/json's %v", raw, err, want)
		}
		if err != nil {
			return
		}
		for name, got := range map[string][]byte{"data": data, "errors": errs, "extensions": ext} {
			w, ok := members[name]
			if (got != nil) != ok || !bytes.Equal(got, w) {
				t.Fatalf("%q: %s %q, encoding/json's %q (present %v)", raw, name, got, w, ok)
			}
		}
	})
}

// BenchmarkDecodeResponse is the decoding of a 1,000-object response, as
// the forwarder reads it, against encoding/json's decoding into a map of
// raw members:
//
//	go test -run '^$' -bench DecodeResponse ./cmd/costguard-proxy/internal/upstream
func BenchmarkDecodeResponse(b *testing.B) {
	var buf bytes.Buffer
	buf.WriteString(`{"data":{"labels":[`)
	for i := range 1000 {
		if i > 0 {
			buf.WriteByte(',')
		}
		buf.WriteString(`{"name":"label-0001","color":"#ff8800","description":"a \"quoted\" word"}`)
	}
	buf.WriteString(`]},"extensions":{"tracing":{"version":1}}}`)
	raw := buf.Bytes()
	b.Run("forwarder", func(b *testing.B) {
		b.SetBytes(int64(len(raw)))
		for b.Loop() {
			if _, err := decodeResponse(raw); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.SetBytes(int64(len(raw)))
		for b.Loop() {
			var members map[string]json.RawMessage
			if err := json.Unmarshal(raw, &members); err != nil {
				b.Fatal(err)
			}
		}
	})
}
