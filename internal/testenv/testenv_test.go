package testenv

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

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
		r := &recorder{TB: t}
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
	if want := LongEnv + "=1 go test work"; !strings.Contains(string(readme), want) {
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
		case test < 0 && strings.Contains(line, "go test -race"):
			test = i
		}
	}
	if export < 0 || test < 0 || export > test {
		t.Errorf(".ci/run does not export %s=1 before go test -race", LongEnv)
	}
}

// recorder stands in for a test: it records Skip and Fatal instead of
// ending the goroutine.
type recorder struct {
	testing.TB
	skipped, failed string
}

func (r *recorder) Helper()           {}
func (r *recorder) Skip(args ...any)  { r.skipped = args[0].(string) }
func (r *recorder) Fatal(args ...any) { r.failed = args[0].(string) }

// Missing skips, except under CI=true, where it fails; never both.
func TestMissing(t *testing.T) {
	for _, ci := range []string{"", "true"} {
		t.Setenv("CI", ci)
		r := &recorder{TB: t}
		Missing(r, "redis-server missing")
		if got, other := r.skipped, r.failed; (ci == "true") == (got != "") || (got == "") == (other == "") {
			t.Errorf("CI=%q: skipped %q, failed %q", ci, r.skipped, r.failed)
		}
	}
}
