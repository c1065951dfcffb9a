package complexity

import "testing"

// plainKey compares a key in place only when the bytes compared are the
// whole JSON string spelling it: a key JSON must escape (never a parsed
// name) is left to key to decode, unless the tree vouches for its names.
func TestPlainKey(t *testing.T) {
	tests := []struct {
		name, key, data string
		names, want     bool
	}{
		{"a name", "title", `"title":"x"`, false, true},
		{"a name, vouched for", "title", `"title":"x"`, true, true},
		{"a longer key", "title", `"titles":"x"`, false, false},
		{"a shorter key", "title", `"titl":"x"`, false, false},
		{"whitespace before the colon", "title", `"title" :"x"`, false, false},
		{"an escaped key", "title", `"titl\u0065":"x"`, false, false},
		{"cut short", "title", `"title"`, false, false},
		{"a quote in the key", `a"b`, `"a"b":1`, false, false},
		{"a backslash in the key", `a\nb`, `"a\nb":1`, false, false},
		{"a control character in the key", "a\tb", "\"a\tb\":1", false, false},
	}
	for _, tt := range tests {
		r := response{b: []byte(tt.data), s: new(reading), names: tt.names}
		if got := r.plainKey(tt.key); got != tt.want {
			t.Errorf("%s: plainKey(%q) in %q = %v, want %v", tt.name, tt.key, tt.data, got, tt.want)
		}
		if !tt.want && r.i != 0 {
			t.Errorf("%s: moved to %d without a match", tt.name, r.i)
		}
	}
}
