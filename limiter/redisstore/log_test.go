package redisstore_test

import (
	"bytes"
	"context"
	"log"
	"log/slog"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/logging"

	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/limiter/redisstore"
)

// logRecorder is an slog.Handler that hands every record it is enabled for
// to a channel.
type logRecorder struct {
	level   slog.Level
	records chan slog.Record
}

func newLogRecorder(level slog.Level) *logRecorder {
	return &logRecorder{level: level, records: make(chan slog.Record, 64)}
}

func (h *logRecorder) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level }
func (h *logRecorder) WithAttrs([]slog.Attr) slog.Handler           { return h }
func (h *logRecorder) WithGroup(string) slog.Handler                { return h }

func (h *logRecorder) Handle(_ context.Context, r slog.Record) error {
	select {
	case h.records <- r.Clone():
	default: // full: the test has seen enough
	}
	return nil
}

// lockedBuffer is a bytes.Buffer the standard logger may write to from any
// goroutine.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// A store whose Redis is down: go-redis's pool line about the failed dial
// arrives at the slog handler, at Debug, marked as go-redis's and located
// in go-redis. go-redis has one logger, so a line that arrives here did not
// go to standard error too; the standard log stays empty.
func TestSetGoRedisLogger(t *testing.T) {
	var std lockedBuffer
	prev := log.Writer()
	log.SetOutput(&std)
	t.Cleanup(func() { log.SetOutput(prev) })
	h := newLogRecorder(slog.LevelDebug)
	redisstore.SetGoRedisLogger(slog.New(h))
	// go-redis has no getter for the logger it holds; nothing else in these
	// tests sets one, so the one before was its default, which Enable
	// restores.
	t.Cleanup(logging.Enable)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close() // nothing listens there now
	rdb := redis.NewClient(&redis.Options{Addr: addr, DialerRetries: 1, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	s := newStoreWith(t, rdb, nil, redisstore.Config{DisableCoalescing: true})

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	limit := limiter.Limit{Algorithm: limiter.TokenBucket, Burst: 10, Rate: 10, Period: time.Second}
	if _, err := s.Take(ctx, "user:1", limit, 1); err == nil {
		t.Fatal("Take on a closed port succeeded")
	}

	for {
		select {
		case r := <-h.records:
			if r.Level != slog.LevelDebug {
				t.Errorf("%q at %v, want DEBUG", r.Message, r.Level)
			}
			var component string
			r.Attrs(func(a slog.Attr) bool {
				if a.Key == "component" {
					component = a.Value.String()
				}
				return true
			})
			if component != redisstore.GoRedisComponent {
				t.Errorf("%q: component %q, want %q", r.Message, component, redisstore.GoRedisComponent)
			}
			if !strings.Contains(r.Message, "failed to dial") {
				continue // another of go-redis's lines
			}
			frame, _ := runtime.CallersFrames([]uintptr{r.PC}).Next()
			t.Logf("%s:%d: %s", frame.File, frame.Line, r.Message)
			if !strings.Contains(frame.File, "go-redis") {
				t.Errorf("%q located at %s:%d, want go-redis's call", r.Message, frame.File, frame.Line)
			}
			if out := std.String(); out != "" {
				t.Errorf("the standard log got %q", out)
			}
			return
		case <-ctx.Done():
			t.Fatal("no go-redis line about the failed dial reached the handler")
		}
	}
}
