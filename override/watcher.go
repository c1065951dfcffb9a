package override

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"maps"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultPollInterval is how often a Watcher asks its store whether the
// overrides changed: every process applies a change within this plus one
// round trip (well within a second).
const DefaultPollInterval = 250 * time.Millisecond

// CallTimeout bounds each of a Watcher's store calls (a poll, a Put, a
// Delete), within the caller's own deadline.
const CallTimeout = time.Second

// Clock tells the time; limiter.Clock satisfies it.
type Clock interface{ Now() time.Time }

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// Snapshot is the overrides as a Watcher last read them: immutable.
type Snapshot struct {
	version Version
	entries map[string]Override
	// expiring: some entry has an Until, so a poll may find one to purge.
	expiring bool
}

// Version is the store's version the snapshot was read at.
func (s *Snapshot) Version() Version { return s.version }

// Len is the number of overrides held, expired ones included.
func (s *Snapshot) Len() int { return len(s.entries) }

// All yields every override held, expired ones included, in no order.
func (s *Snapshot) All() iter.Seq2[string, Override] { return maps.All(s.entries) }

// Get returns key's override when it applies at now (it exists and has
// not expired).
func (s *Snapshot) Get(key string, now time.Time) (Override, bool) {
	o, ok := s.Find(key)
	if !ok || o.Expired(now) {
		return Override{}, false
	}
	return o, true
}

// Find returns key's override, expired or not: a caller that reads the
// clock only when there is one checks Expired itself.
func (s *Snapshot) Find(key string) (Override, bool) {
	if len(s.entries) == 0 {
		return Override{}, false
	}
	o, ok := s.entries[key]
	return o, ok
}

// Watcher keeps a local Snapshot of a Store, refreshed by polling the
// store's version and reading the overrides again whenever the version is
// not the snapshot's (the whole Version: a store that lost data and
// counted back to the same N has another ID). Build it with NewWatcher;
// Close stops its goroutine.
type Watcher struct {
	store    Store
	clock    Clock
	log      *slog.Logger
	interval time.Duration
	snap     atomic.Pointer[Snapshot]
	refresh  sync.Mutex // one refresh at a time
	stop     chan struct{}
	done     chan struct{}
	failed   atomic.Bool // the last poll failed: logged once until one succeeds
}

// WatcherOption configures a Watcher.
type WatcherOption func(*Watcher)

// WithPollInterval sets how often the store is polled (default
// DefaultPollInterval); 0 or less starts no goroutine: the caller calls
// Refresh (tests do, on an injected clock).
func WithPollInterval(d time.Duration) WatcherOption { return func(w *Watcher) { w.interval = d } }

// WithClock sets the time expiry is judged by. Default the system clock.
func WithClock(c Clock) WatcherOption { return func(w *Watcher) { w.clock = c } }

// WithLogger sets where failed polls are logged. Default slog.Default().
func WithLogger(l *slog.Logger) WatcherOption { return func(w *Watcher) { w.log = l } }

// NewWatcher reads store once (an error then is returned: a store that
// cannot be read fails at start) and starts polling it.
func NewWatcher(ctx context.Context, store Store, opts ...WatcherOption) (*Watcher, error) {
	if store == nil {
		return nil, errors.New("override: NewWatcher: nil store")
	}
	w := &Watcher{store: store, interval: DefaultPollInterval, stop: make(chan struct{}), done: make(chan struct{})}
	for _, o := range opts {
		o(w)
	}
	if w.clock == nil {
		w.clock = systemClock{}
	}
	if w.log == nil {
		w.log = slog.Default()
	}
	w.snap.Store(&Snapshot{version: Version{N: -1}}) // no store's
	if err := w.Refresh(ctx); err != nil {
		return nil, fmt.Errorf("override: reading the overrides: %w", err)
	}
	if w.interval <= 0 {
		close(w.done)
		return w, nil
	}
	go w.poll()
	return w, nil
}

// Snapshot is the overrides in force in this process: no I/O.
func (w *Watcher) Snapshot() *Snapshot { return w.snap.Load() }

// Refresh asks the store for its version and, when it is not the
// snapshot's, reads the overrides again; when the snapshot holds an
// expired override, it purges the store first (the purge answers the
// version). Safe for concurrent use.
func (w *Watcher) Refresh(ctx context.Context) error {
	w.refresh.Lock()
	defer w.refresh.Unlock()
	var v Version
	var err error
	if w.hasExpired() {
		v, err = w.store.Purge(ctx, w.clock.Now())
	} else {
		v, err = w.store.Version(ctx)
	}
	if err != nil {
		return err
	}
	return w.applyLocked(ctx, v)
}

// hasExpired reports whether the snapshot holds an override expired now.
func (w *Watcher) hasExpired() bool {
	cur := w.snap.Load()
	if !cur.expiring {
		return false
	}
	now := w.clock.Now()
	for _, o := range cur.entries {
		if o.Expired(now) {
			return true
		}
	}
	return false
}

// apply brings the snapshot to v, the version a change made through this
// Watcher returned: at once, not at the next poll.
func (w *Watcher) apply(ctx context.Context, v Version) error {
	w.refresh.Lock()
	defer w.refresh.Unlock()
	return w.applyLocked(ctx, v)
}

// applyLocked reads the overrides again unless the snapshot is at v. The
// read is later than what answered v, so it holds v's overrides or newer.
func (w *Watcher) applyLocked(ctx context.Context, v Version) error {
	cur := w.snap.Load()
	if v == cur.version {
		return nil
	}
	if cur.version.N >= 0 && v.N <= cur.version.N {
		// Every change counts one more: a count that did not move
		// forward with another version is changes lost.
		w.log.Warn("override: the store's version went back: it lost changes (a flush, a restart without persistence, a failover to a replica behind); reading the overrides again",
			"was", cur.version.String(), "now", v.String())
	}
	entries, v, err := w.store.Load(ctx)
	if err != nil {
		return err
	}
	s := &Snapshot{version: v, entries: entries}
	for _, o := range entries {
		s.expiring = s.expiring || !o.Until.IsZero()
	}
	w.snap.Store(s)
	return nil
}

// Put validates o and sets key's override in the store, then brings this
// process's snapshot to the version the write returned, so that it
// applies here at once (elsewhere within a poll). The two store calls
// take at most CallTimeout.
func (w *Watcher) Put(ctx context.Context, key string, o Override) error {
	ctx, cancel := context.WithTimeout(ctx, CallTimeout)
	defer cancel()
	now := w.clock.Now()
	if err := o.Validate(now); err != nil {
		return err
	}
	v, err := w.store.Put(ctx, key, o, now)
	if err != nil {
		return err
	}
	return w.apply(ctx, v)
}

// Delete removes key's override from the store and brings this process's
// snapshot to the version the delete returned; it reports whether there
// was one.
func (w *Watcher) Delete(ctx context.Context, key string) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, CallTimeout)
	defer cancel()
	ok, v, err := w.store.Delete(ctx, key)
	if err != nil {
		return false, err
	}
	return ok, w.apply(ctx, v)
}

// Now is the Watcher's clock's reading.
func (w *Watcher) Now() time.Time { return w.clock.Now() }

// Close stops polling. It is safe to call more than once.
func (w *Watcher) Close() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}

func (w *Watcher) poll() {
	defer close(w.done)
	t := time.NewTicker(w.interval)
	defer t.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), CallTimeout)
		err := w.Refresh(ctx)
		cancel()
		switch {
		case err != nil && !w.failed.Swap(true):
			w.log.Warn("override: reading the overrides failed; the last ones read stay in force", "err", err)
		case err == nil && w.failed.Swap(false):
			w.log.Info("override: reading the overrides works again")
		}
	}
}
