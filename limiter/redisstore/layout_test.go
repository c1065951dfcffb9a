package redisstore_test

import (
	"context"
	"encoding/binary"
	"strconv"
	"testing"
	"time"

	"github.com/costguard/costguard/internal/redistest"
	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/limiter/limitertest"
)

// bucketValue is a bucket key's value as docs/redis.md describes it: the
// level in 5 bytes and the time in 7 when the level is below 2^39, else 8
// and 8, little-endian.
func bucketValue(level, last int64) string {
	var b []byte
	if level < 1<<39 {
		b = binary.LittleEndian.AppendUint64(nil, uint64(level))[:5]
		b = append(b, binary.LittleEndian.AppendUint64(nil, uint64(last))[:7]...)
	} else {
		b = binary.LittleEndian.AppendUint64(nil, uint64(level))
		b = binary.LittleEndian.AppendUint64(b, uint64(last))
	}
	return string(b)
}

// TestBucketLayout pins a bucket key's value, short and long, and checks
// that a key in the earlier layout (a HASH of l and t) is read as the same
// state and rewritten in the new one: an upgrade keeps every budget.
func TestBucketLayout(t *testing.T) {
	rdb := redistest.SharedServer(t).Client(t)
	ctx := context.Background()
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	now := start.UnixMicro()
	for _, tc := range []struct {
		name  string
		limit limiter.Limit
		cost  int64
	}{
		// p = 1000 units per token: the level after 5 tokens is 5,000.
		{"short", limiter.Limit{Algorithm: limiter.TokenBucket, Burst: 10, Rate: 1000, Period: time.Second}, 5},
		// p = 10^6 (a rate of 1 per second), 10^6 tokens taken: 2^39 < 10^12.
		{"long", limiter.Limit{Algorithm: limiter.LeakyBucketPolicing, Burst: 2_000_000, Rate: 1, Period: time.Second}, 1_000_000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t, rdb, limitertest.NewFakeClock(start))
			key := s.Key("user", tc.limit.Algorithm)
			b, err := tc.limit.Bucket()
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Take(ctx, "user", tc.limit, tc.cost); err != nil {
				t.Fatal(err)
			}
			want := bucketValue(tc.cost*b.Unit, now)
			if got := rdb.Get(ctx, key).Val(); got != want {
				t.Fatalf("value %x (%d bytes), want %x (%d bytes)", got, len(got), want, len(want))
			}
			if enc := rdb.ObjectEncoding(ctx, key).Val(); enc != "embstr" {
				t.Errorf("OBJECT ENCODING %q, want embstr", enc)
			}

			// The earlier layout: a HASH, read once and replaced.
			old := limiter.BucketState{Level: tc.cost * b.Unit, Last: now - 100}
			if err := rdb.Del(ctx, key).Err(); err != nil {
				t.Fatal(err)
			}
			if err := rdb.HSet(ctx, key, "l", strconv.FormatInt(old.Level, 10), "t", strconv.FormatInt(old.Last, 10)).Err(); err != nil {
				t.Fatal(err)
			}
			wantState, wantD, err := limiter.TakeBucket(tc.limit, old, now, 1)
			if err != nil {
				t.Fatal(err)
			}
			d, err := s.Take(ctx, "user", tc.limit, 1)
			if err != nil || d != wantD {
				t.Fatalf("Take on the HASH layout: %+v, %v; want %+v", d, err, wantD)
			}
			if typ := rdb.Type(ctx, key).Val(); typ != "string" {
				t.Fatalf("after the take the key is a %s, want a string", typ)
			}
			if got := rdb.Get(ctx, key).Val(); got != bucketValue(wantState.Level, wantState.Last) {
				t.Fatalf("value %x, want %x", got, bucketValue(wantState.Level, wantState.Last))
			}
			if ttl := rdb.PTTL(ctx, key).Val(); ttl <= 0 {
				t.Fatalf("PTTL %v: the rewritten key must expire", ttl)
			}
		})
	}
}
