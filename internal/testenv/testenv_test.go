package testenv

import (
	"os"
	"path/filepath"
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

// The README tells contributors how to run the long suites, and CI runs
// them: .ci/run exports the variable before its go test.
func TestDocumentedAndRunInCI(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if want := LongEnv + "=1 go test ./..."; !strings.Contains(string(readme), want) {
		t.Errorf("README.md does not say %q", want)
	}
	ci, err := os.ReadFile(filepath.Join("..", "..", ".ci", "run"))
	if err != nil {
		t.Fatal(err)
	}
	export, test := -1, -1
	for i, line := range strings.Split(string(ci), "\n") {
		switch {
		case export < 0 && strings.HasPrefix(line, "export "+LongEnv+"=1"):
			export = i
		case test < 0 && strings.HasPrefix(line, "go test -race"):
			test = i
		}
	}
	if export < 0 || test < 0 || export > test {
		t.Errorf(".ci/run does not export %s=1 before go test -race", LongEnv)
	}
}
