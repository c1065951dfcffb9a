// Package redisspenders shares the top spenders of several processes
// through Redis, so that any of them answers for all: each process
// publishes its spenders.Tracker's reports every Interval, off the
// decision path (no request waits for it, and a decision makes no round
// trip for it), and a query merges what every live process published
// (spenders.Merge, whose bounds hold across processes).
//
// One Redis hash per window, "<prefix>:{<window>}" (one key, so one
// Cluster slot), holds a field per process: its reports of every plan, as
// JSON, and when they were made. A field older than three Intervals is a
// process that stopped: queries skip it and delete it. Each publish costs
// one HSET and one PEXPIRE per window, of at most Limit spenders per plan.
package redisspenders

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/costguard/costguard/spenders"
)

// Defaults of a zero Config.
const (
	DefaultPrefix   = "costguard:spenders"
	DefaultInterval = 5 * time.Second
	DefaultLimit    = 256
)

// ErrInvalidConfig wraps New's errors.
var ErrInvalidConfig = errors.New("redisspenders: invalid config")

// Config configures a Shared.
type Config struct {
	// Client reaches the Redis (standalone, Sentinel or Cluster).
	Client redis.UniversalClient
	// Tracker is this process's.
	Tracker *spenders.Tracker
	// ID names this process among the publishers. Default: random.
	ID string
	// Prefix starts the keys. Default DefaultPrefix.
	Prefix string
	// Interval is how often Run publishes. Default 5 s: a query sees
	// another process's spending at most that late.
	Interval time.Duration
	// Limit is the spenders published per plan and window. Default 256.
	Limit int
}

// Shared publishes a Tracker's reports and reads everyone's.
type Shared struct {
	cfg Config
}

// published is one process's field: its reports of one window.
type published struct {
	At      time.Time         `json:"at"`
	Reports []spenders.Report `json:"reports"`
}

// New checks cfg.
func New(cfg Config) (*Shared, error) {
	if cfg.Client == nil || cfg.Tracker == nil {
		return nil, fmt.Errorf("%w: a Client and a Tracker are required", ErrInvalidConfig)
	}
	if cfg.ID == "" {
		var b [8]byte
		_, _ = rand.Read(b[:])
		cfg.ID = hex.EncodeToString(b[:])
	}
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultPrefix
	}
	if cfg.Interval == 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Limit == 0 {
		cfg.Limit = DefaultLimit
	}
	if cfg.Interval < 0 || cfg.Limit < 1 {
		return nil, fmt.Errorf("%w: interval %v and limit %d must be positive", ErrInvalidConfig, cfg.Interval, cfg.Limit)
	}
	return &Shared{cfg: cfg}, nil
}

func (s *Shared) key(window string) string { return s.cfg.Prefix + ":{" + window + "}" }

// Publish writes this process's reports of every window, as of now.
func (s *Shared) Publish(ctx context.Context, now time.Time) error {
	t := s.cfg.Tracker
	for _, w := range t.Windows() {
		p := published{At: now, Reports: []spenders.Report{}}
		for _, plan := range t.Plans() {
			rep, err := t.Top(now, plan, w, s.cfg.Limit)
			if err != nil {
				return err
			}
			p.Reports = append(p.Reports, rep)
		}
		b, err := json.Marshal(p)
		if err != nil {
			return err
		}
		pipe := s.cfg.Client.TxPipeline()
		pipe.HSet(ctx, s.key(w), s.cfg.ID, b)
		pipe.PExpire(ctx, s.key(w), 3*s.cfg.Interval)
		if _, err := pipe.Exec(ctx); err != nil {
			return fmt.Errorf("redisspenders: publishing window %s: %w", w, err)
		}
	}
	return nil
}

// Reports returns the reports of window that every live process
// published (this one's included once it has published), all plans; it
// deletes the fields of processes that stopped publishing.
func (s *Shared) Reports(ctx context.Context, now time.Time, window string) ([]spenders.Report, error) {
	fields, err := s.cfg.Client.HGetAll(ctx, s.key(window)).Result()
	if err != nil {
		return nil, fmt.Errorf("redisspenders: reading window %s: %w", window, err)
	}
	var out []spenders.Report
	var stale []string
	for id, v := range fields {
		var p published
		if json.Unmarshal([]byte(v), &p) != nil || now.Sub(p.At) > 3*s.cfg.Interval {
			stale = append(stale, id)
			continue
		}
		out = append(out, p.Reports...)
	}
	if len(stale) > 0 {
		_ = s.cfg.Client.HDel(ctx, s.key(window), stale...).Err() // best effort: the next query tries again
	}
	return out, nil
}

// Run publishes every Interval, reading the time from now, until ctx
// ends; a failed publish is reported to onError (nil: ignored) and tried
// again at the next tick.
func (s *Shared) Run(ctx context.Context, now func() time.Time, onError func(error)) {
	tick := time.NewTicker(s.cfg.Interval)
	defer tick.Stop()
	for {
		if err := s.Publish(ctx, now()); err != nil && onError != nil && ctx.Err() == nil {
			onError(err)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
