package redisspenders_test

import (
	"testing"
	"time"

	"github.com/costguard/costguard/internal/redistest"
	"github.com/costguard/costguard/spenders"
	"github.com/costguard/costguard/spenders/redisspenders"
)

func TestMain(m *testing.M) { redistest.Main(m) }

var t0 = time.Date(2026, 12, 3, 12, 0, 30, 0, time.UTC)

// Two processes publish to one Redis; a query reads both, merges them into
// the plan's top, and forgets a process that stopped publishing.
func TestTwoProcessesMerge(t *testing.T) {
	srv := redistest.StartServer(t)
	var shared []*redisspenders.Shared
	for i, spend := range []map[string]int64{
		{"user:alice": 300, "user:bob": 50},
		{"user:alice": 200, "user:carol": 120},
	} {
		tr, err := spenders.New(spenders.Config{})
		if err != nil {
			t.Fatal(err)
		}
		for p, w := range spend {
			tr.Add(t0, "free", p, w)
		}
		s, err := redisspenders.New(redisspenders.Config{Client: srv.Client(t), Tracker: tr, ID: []string{"a", "b"}[i], Interval: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Publish(t.Context(), t0); err != nil {
			t.Fatal(err)
		}
		shared = append(shared, s)
	}
	reps, err := shared[0].Reports(t.Context(), t0.Add(time.Second), "1m")
	if err != nil {
		t.Fatal(err)
	}
	m := spenders.Merge(10, reps...)
	want := []spenders.Spender{{Principal: "user:alice", Points: 500}, {Principal: "user:carol", Points: 120}, {Principal: "user:bob", Points: 50}}
	if m.Total != 670 || len(m.Spenders) != 3 || m.Spenders[0] != want[0] || m.Spenders[1] != want[1] || m.Spenders[2] != want[2] {
		t.Errorf("merged: total %d, %v; want 670, %v", m.Total, m.Spenders, want)
	}
	// Process b publishes again later; a stopped long ago: its field is
	// stale (older than three intervals), skipped and deleted.
	if err := shared[1].Publish(t.Context(), t0.Add(10*time.Second)); err != nil {
		t.Fatal(err)
	}
	reps, err = shared[1].Reports(t.Context(), t0.Add(11*time.Second), "1m")
	if err != nil {
		t.Fatal(err)
	}
	if m := spenders.Merge(10, reps...); m.Total != 320 {
		t.Errorf("after a stopped: total %d, want 320 (b's alone)", m.Total)
	}
	if n, err := srv.Client(t).HLen(t.Context(), redisspenders.DefaultPrefix+":{1m}").Result(); err != nil || n != 1 {
		t.Errorf("fields left: %d, %v; want 1", n, err)
	}
}
