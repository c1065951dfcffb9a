package concurrency_test

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/costguard/costguard/limiter/concurrency"
)

// TestDocumentedValues pins what docs/limiter.md and docs/redis.md state.
func TestDocumentedValues(t *testing.T) {
	for _, c := range []struct {
		name      string
		got, want any
	}{
		{"DefaultTTL", concurrency.DefaultTTL, 60 * time.Second},
		{"RetryHint", concurrency.RetryHint, time.Second},
		{"MaxTTL", concurrency.MaxTTL, 24 * time.Hour},
		{"MaxLimit", concurrency.MaxLimit, 65_536},
		{"DefaultMaxKeys", concurrency.DefaultMaxKeys, 100_000},
		{"DefaultShards", concurrency.DefaultShards, 64},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v; the docs say %v", c.name, c.got, c.want)
		}
	}
	doc, err := os.ReadFile("../../docs/limiter.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"`DefaultTTL` is 60 s", "`RetryHint` (1 s)", "`MaxLimit` = 65,536", "`MaxTTL` = 24 h",
		"`MaxKeys` (100,000) and `Shards` (64) defaults",
	} {
		if !strings.Contains(string(doc), want) {
			t.Errorf("docs/limiter.md no longer says %q", want)
		}
	}
}

func TestRetryAfter(t *testing.T) {
	for _, c := range []struct {
		until, want time.Duration
	}{
		{time.Microsecond, time.Microsecond},
		{300 * time.Millisecond, 300 * time.Millisecond},
		{time.Second, time.Second},
		{time.Minute, concurrency.RetryHint},
		{0, 1}, // never zero: a refusal always says when to retry
	} {
		if got := concurrency.RetryAfter(c.until); got != c.want {
			t.Errorf("RetryAfter(%v) = %v, want %v", c.until, got, c.want)
		}
	}
}

func TestValidate(t *testing.T) {
	for _, c := range []struct {
		limit int64
		ttl   time.Duration
		want  error
	}{
		{1, time.Nanosecond, nil},
		{concurrency.MaxLimit, concurrency.MaxTTL, nil},
		{0, time.Minute, concurrency.ErrInvalidLimit},
		{concurrency.MaxLimit + 1, time.Minute, concurrency.ErrInvalidLimit},
		{1, 0, concurrency.ErrInvalidTTL},
		{1, concurrency.MaxTTL + 1, concurrency.ErrInvalidTTL},
	} {
		if err := concurrency.Validate(c.limit, c.ttl); !errors.Is(err, c.want) || (c.want == nil) != (err == nil) {
			t.Errorf("Validate(%d, %v) = %v, want %v", c.limit, c.ttl, err, c.want)
		}
	}
}

func TestLease(t *testing.T) {
	if !(concurrency.Lease{}).IsZero() || (concurrency.Lease{Key: "k"}).IsZero() {
		t.Error("IsZero")
	}
	id := concurrency.LeaseID{0x01, 0xab, 15: 0xff}
	if got, want := id.String(), "01ab00000000000000000000000000ff"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	d := concurrency.Decision{Limit: 5, Held: 7}
	if d.Remaining() != 0 {
		t.Errorf("Remaining with Held above Limit = %d, want 0", d.Remaining())
	}
	if d := (concurrency.Decision{Limit: 5, Held: 2}); d.Remaining() != 3 {
		t.Errorf("Remaining = %d, want 3", d.Remaining())
	}
}
