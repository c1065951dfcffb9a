package tailbuf

import "testing"

func TestBufferKeepsTheTail(t *testing.T) {
	b := &Buffer{Max: 4}
	for _, s := range []string{"ab", "cd", "efg"} {
		if n, err := b.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", s, n, err)
		}
	}
	if got := b.String(); got != "defg" {
		t.Fatalf("kept %q, want %q", got, "defg")
	}
}
