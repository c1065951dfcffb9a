package challenge

import (
	"crypto/sha256"
	"encoding/binary"
	"runtime"
	"testing"
)

// BenchmarkUsedSetMemory reports the heap a full used set holds per token:
// DefaultMaxUsed tokens accepted evenly over one TTL, as under a steady
// flood, with the default window (65 s over 64 generations).
func BenchmarkUsedSetMemory(b *testing.B) {
	const ttlMS, n = 60_000, DefaultMaxUsed
	var perToken float64
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		var u usedSet
		u.init(n, ttlMS+5_000)
		var seed [8]byte
		for i := range n {
			now := int64(i) * ttlMS / n
			binary.BigEndian.PutUint64(seed[:], uint64(i))
			sum := sha256.Sum256(seed[:])
			if err := u.add(usedKey(sum[:usedKeyLen]), now+ttlMS, now); err != nil {
				b.Fatal(err)
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		perToken = float64(after.HeapAlloc-before.HeapAlloc) / n
		runtime.KeepAlive(&u)
	}
	b.ReportMetric(perToken, "B/token")
}
