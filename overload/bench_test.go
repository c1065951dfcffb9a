package overload_test

import (
	"context"
	"testing"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/costguard/costguard/overload"
)

// admitter is one way to bound the requests in flight: once tries to take
// a slot without blocking and, when it did, gives it back.
type admitter struct {
	name string
	once func() (admitted bool)
}

// BenchmarkAdmitRelease: one admission and one release per op, at a
// capacity the workload never reaches (uncontended: serial, one
// goroutine; parallel: GOMAXPROCS goroutines) and at a capacity of 1 that
// most parallel attempts find full (saturated). The peers, on the same
// workload: golang.org/x/sync/semaphore.Weighted (TryAcquire(1),
// Release(1)) and a buffered channel used as a semaphore. The overload
// variants add a degradation list of two features, and the adaptive
// capacity fed a constant latency.
//
//	go test -run '^$' -bench AdmitRelease -benchmem ./overload/
func BenchmarkAdmitRelease(b *testing.B) {
	peers := func(capacity int) []admitter {
		shedder := func(cfg overload.Config) func() bool {
			cfg.MaxInFlight = capacity
			if capacity == 1 { // give every priority a slot at capacity 1
				cfg.ShedAt = map[overload.Priority]float64{overload.Sheddable: 1, overload.Normal: 1, overload.High: 1}
			}
			s, err := overload.New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			return func() bool {
				p, err := s.Admit(ctx, overload.Normal, 0)
				if err != nil {
					return false
				}
				p.Done(time.Millisecond) // a latency sample, as the middleware will give
				return true
			}
		}
		sem := semaphore.NewWeighted(int64(capacity))
		ch := make(chan struct{}, capacity)
		return []admitter{
			{"overload", shedder(overload.Config{})},
			{"overload+degradation", shedder(overload.Config{Degradation: []overload.Feature{{Name: "recommendations", At: 0.7}, {Name: "search", At: 0.85}}})},
			{"overload+adaptive", shedder(overload.Config{Adaptive: true})},
			{"x-sync-semaphore", func() bool {
				if !sem.TryAcquire(1) {
					return false
				}
				sem.Release(1)
				return true
			}},
			{"chan", func() bool {
				select {
				case ch <- struct{}{}:
					<-ch
					return true
				default:
					return false
				}
			}},
		}
	}
	workloads := []struct {
		name     string
		capacity int
		parallel bool
	}{
		{"serial", 1024, false},
		{"parallel", 1024, true},
		{"saturated", 1, true},
	}
	for _, w := range workloads {
		for _, a := range peers(w.capacity) {
			b.Run(w.name+"/"+a.name, func(b *testing.B) {
				b.ReportAllocs()
				if !w.parallel {
					for b.Loop() {
						if !a.once() {
							b.Fatal("refused below capacity")
						}
					}
					return
				}
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						a.once()
					}
				})
			})
		}
	}
}

// BenchmarkDegraded: what a resolver pays to ask whether a feature is off.
//
//	go test -run '^$' -bench Degraded -benchmem ./overload/
func BenchmarkDegraded(b *testing.B) {
	s, err := overload.New(overload.Config{
		MaxInFlight: 64,
		Degradation: []overload.Feature{{Name: "recommendations", At: 0.7}, {Name: "search", At: 0.85}},
	})
	if err != nil {
		b.Fatal(err)
	}
	ctx := overload.WithDegradation(context.Background(), s)
	ctx, cancel := context.WithCancel(ctx) // a request context has layers above it
	defer cancel()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if overload.Degraded(ctx, "search") {
				b.Error("search off at rest")
			}
		}
	})
}
