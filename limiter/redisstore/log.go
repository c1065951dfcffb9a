package redisstore

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// GoRedisComponent is the value of the "component" attribute on the lines
// SetGoRedisLogger passes on. (Not "source": slog's handlers write the
// caller's file and line under that key.)
const GoRedisComponent = "go-redis"

// SetGoRedisLogger sends the lines go-redis logs on its own, such as
// "redis: connection pool: failed to dial after 5 attempts: …", to l at
// Debug level with the attribute component=go-redis, instead of writing
// them to standard error. When Redis goes down go-redis logs such a line
// for every request that needs a connection, until PoolSize dials in a
// row have failed, and again after every recovery when Redis flaps. The
// failures themselves reach the caller of Take as errors, and the
// middleware logs them once a minute, so go-redis's lines are detail for
// debugging. When l's handler is not enabled for Debug a line costs no
// formatting.
//
// go-redis has one logger for the whole process (redis.SetLogger), so this
// is process-wide: it routes the lines of every go-redis client in the
// program, not only of those given to a Store, and the last call (of this
// function or of redis.SetLogger) wins. Call it once at start-up. A nil l
// logs to slog.Default() as it is when each line is written. go-redis's
// own level (redis.SetLogLevel) still chooses which lines it writes.
// logging.Enable, in go-redis, restores its logger to standard error.
func SetGoRedisLogger(l *slog.Logger) {
	redis.SetLogger(goRedisLogger{l})
}

// goRedisLogger is go-redis's Logging interface on an *slog.Logger.
type goRedisLogger struct{ l *slog.Logger }

// Printf logs one go-redis line at Debug. Its source is go-redis's call:
// the frame above go-redis's forwarding Printf, the frame go-redis's own
// default logger names.
func (g goRedisLogger) Printf(ctx context.Context, format string, v ...any) {
	l := g.l
	if l == nil {
		l = slog.Default()
	}
	if ctx == nil {
		ctx = context.Background()
	}
	h := l.Handler()
	if !h.Enabled(ctx, slog.LevelDebug) {
		return
	}
	var pcs [1]uintptr
	runtime.Callers(3, pcs[:]) // runtime.Callers, this Printf, go-redis's forwarding Printf
	r := slog.NewRecord(time.Now(), slog.LevelDebug, strings.TrimSuffix(fmt.Sprintf(format, v...), "\n"), pcs[0])
	r.AddAttrs(slog.String("component", GoRedisComponent))
	_ = h.Handle(ctx, r) // as slog.Logger does: a handler's error has nowhere to go
}
