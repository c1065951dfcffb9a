package redisstore

import (
	"context"
	"log/slog"
	"testing"
)

// capture is an slog.Handler that keeps the records it is enabled for.
type capture struct {
	level   slog.Level
	records []slog.Record
}

func (h *capture) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level }
func (h *capture) Handle(_ context.Context, r slog.Record) error {
	h.records = append(h.records, r)
	return nil
}
func (h *capture) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *capture) WithGroup(string) slog.Handler      { return h }

// counted counts how often it is formatted.
type counted struct{ n *int }

func (c counted) String() string { *c.n++; return "x" }

func TestGoRedisLoggerLevel(t *testing.T) {
	var formatted int
	info := &capture{level: slog.LevelInfo}
	goRedisLogger{slog.New(info)}.Printf(context.Background(), "redis: %v", counted{&formatted})
	if len(info.records) != 0 || formatted != 0 {
		t.Errorf("a handler without Debug got %d records, %d formattings; want none", len(info.records), formatted)
	}

	debug := &capture{level: slog.LevelDebug}
	var noCtx context.Context // go-redis's interface does not promise one
	goRedisLogger{slog.New(debug)}.Printf(noCtx, "redis: %v failed\n", counted{&formatted})
	if len(debug.records) != 1 {
		t.Fatalf("%d records, want 1", len(debug.records))
	}
	if r := debug.records[0]; r.Level != slog.LevelDebug || r.Message != "redis: x failed" {
		t.Errorf("record %v %q, want DEBUG %q", r.Level, r.Message, "redis: x failed")
	}
}

// A nil logger logs to slog.Default() as it is when the line is written.
func TestGoRedisLoggerNil(t *testing.T) {
	g := goRedisLogger{}
	h := &capture{level: slog.LevelDebug}
	prev := slog.Default()
	slog.SetDefault(slog.New(h))
	t.Cleanup(func() { slog.SetDefault(prev) })
	g.Printf(context.Background(), "redis: %s", "late default")
	if len(h.records) != 1 || h.records[0].Message != "redis: late default" {
		t.Errorf("records %v, want one on the default logger", h.records)
	}
}
