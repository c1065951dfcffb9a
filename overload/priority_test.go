package overload_test

import (
	"errors"
	"testing"

	"github.com/costguard/costguard/overload"
)

func TestPriorityNames(t *testing.T) {
	tests := []struct {
		p    overload.Priority
		name string
	}{
		{overload.Critical, "critical"},
		{overload.High, "high"},
		{overload.Normal, "normal"},
		{overload.Sheddable, "sheddable"},
	}
	for _, tc := range tests {
		if got := tc.p.String(); got != tc.name {
			t.Errorf("%d.String() = %q, want %q", tc.p, got, tc.name)
		}
		p, err := overload.ParsePriority(tc.name)
		if err != nil || p != tc.p {
			t.Errorf("ParsePriority(%q) = %v, %v", tc.name, p, err)
		}
		var u overload.Priority
		if err := u.UnmarshalText([]byte(tc.name)); err != nil || u != tc.p {
			t.Errorf("UnmarshalText(%q) = %v, %v", tc.name, u, err)
		}
		if b, err := tc.p.MarshalText(); err != nil || string(b) != tc.name {
			t.Errorf("%v.MarshalText() = %q, %v", tc.p, b, err)
		}
	}
	if got := overload.Priority(0); got != overload.Normal {
		t.Errorf("zero Priority is %v, want normal", got)
	}
	if got := overload.Priority(9).String(); got != "Priority(9)" {
		t.Errorf("Priority(9).String() = %q", got)
	}
	if _, err := overload.Priority(9).MarshalText(); !errors.Is(err, overload.ErrInvalidPriority) {
		t.Errorf("MarshalText of Priority(9): %v", err)
	}
	for _, bad := range []string{"", "Critical", "low", " normal", "sheddable "} {
		if _, err := overload.ParsePriority(bad); !errors.Is(err, overload.ErrInvalidPriority) {
			t.Errorf("ParsePriority(%q): %v, want ErrInvalidPriority", bad, err)
		}
	}
	want := []overload.Priority{overload.Sheddable, overload.Normal, overload.High, overload.Critical}
	got := overload.Priorities()
	if len(got) != len(want) {
		t.Fatalf("Priorities() = %v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("Priorities() = %v, want %v", got, want)
		}
	}
}
