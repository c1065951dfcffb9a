package echo_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/costguard/costguard/internal/echo"
)

func TestCut(t *testing.T) {
	a63 := strings.Repeat("a", 63)
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"short", "short"},
		{a63 + "b", a63 + "b"},   // 64 bytes: whole
		{a63 + "bc", a63 + "b…"}, // 65: cut at 64
		{a63 + "é", a63 + "…"},   // 65: é straddles the cut, so it goes
		{strings.Repeat("é", 40), strings.Repeat("é", 32) + "…"}, // 80 bytes of 2-byte runes
	} {
		got := echo.Cut(tc.in)
		if got != tc.want || !utf8.ValidString(got) {
			t.Errorf("Cut(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
