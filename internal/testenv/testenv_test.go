package testenv

import (
	"strings"
	"testing"
)

// skipRecorder stands in for a test: it records Skip instead of ending the
// goroutine.
type skipRecorder struct {
	testing.TB
	skipped string
}

func (r *skipRecorder) Helper()          {}
func (r *skipRecorder) Skip(args ...any) { r.skipped = args[0].(string) }

func TestLong(t *testing.T) {
	tests := []struct {
		long, ci string
		skip     bool
	}{
		{"", "", true},
		{"0", "", true},
		{"", "false", true},
		{"1", "", false},
		{"", "true", false},
		{"1", "true", false},
	}
	for _, tt := range tests {
		t.Setenv(LongEnv, tt.long)
		t.Setenv("CI", tt.ci)
		r := &skipRecorder{TB: t}
		Long(r)
		if got := r.skipped != ""; got != tt.skip {
			t.Errorf("%s=%q CI=%q: skipped %v, want %v", LongEnv, tt.long, tt.ci, got, tt.skip)
		}
		if tt.skip && !strings.Contains(r.skipped, LongEnv+"=1 go test") {
			t.Errorf("the skip message %q does not say how to run the test", r.skipped)
		}
		if got := LongEnabled(); got == tt.skip {
			t.Errorf("%s=%q CI=%q: LongEnabled() = %v", LongEnv, tt.long, tt.ci, got)
		}
	}
}
