package memorystore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/limiter/memorystore"
)

// A key longer than 1 KiB is refused as a full store refuses a new key:
// the store's memory is bounded in bytes, not only in keys.
func TestLongKeyRefused(t *testing.T) {
	s, err := memorystore.New(memorystore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l := limiter.Limit{Burst: 10, Rate: 10, Period: time.Second}
	key := strings.Repeat("k", 1<<10)
	if d, err := s.Take(context.Background(), key, l, 1); err != nil || !d.Allowed {
		t.Fatalf("a key of 1 KiB: %+v, %v", d, err)
	}
	if _, err := s.Take(context.Background(), key+"k", l, 1); !errors.Is(err, memorystore.ErrFull) {
		t.Fatalf("a key past 1 KiB: %v", err)
	}
}
