package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/costguard/costguard/limiter/internal/periodic"
)

// Data-loss detection defaults and bounds (see OnDataLoss).
const (
	// DefaultDataLossInterval is Config.DataLossInterval's default: local
	// state derived from lost data is dropped at most this long (plus one
	// probe's round trip) after the node answers again.
	DefaultDataLossInterval = 500 * time.Millisecond
	// MinDataLossInterval bounds Config.DataLossInterval from below.
	MinDataLossInterval = 10 * time.Millisecond
)

// epochName ends the key each node's epoch token is kept in (see
// OnDataLoss): prefix:epoch, or prefix:{%e<n>}:epoch on a Cluster. No
// identity's tag starts "%e", and no budget key ends in "epoch".
const epochName = "epoch"

// OnDataLoss calls f, from the store's probe goroutine (or from a caller of
// CheckDataLoss), each time the store
// finds that a Redis node it uses has lost data: restarted (without
// persistence, or with it: the store cannot tell), replaced by another
// process (a Sentinel or Cluster failover to a replica, which may have
// lagged), or flushed (FLUSHALL, FLUSHDB). Local state derived from the
// store's answers (remembered rejections, split-budget leases) is then
// stale and f should drop it; package stack wires this up. f must not
// block for long. stop removes f; it is safe to call more than once.
//
// The first OnDataLoss starts the probe goroutine, which Close stops. At
// once, and then every Config.DataLossInterval, it sends each node (each master on a Cluster,
// each shard on a Ring) one round trip, pipelined: INFO server (for the
// node's run_id, which every redis-server process draws afresh) and SET
// NX then GET of the node's epoch key, a random token that outlives
// nothing but the data set it lives in (each probe offers a fresh one;
// the first to find the key missing sets it). A changed run_id, a changed
// token or, on a Cluster or Ring, a master seen for the first time after
// the first round (a failover promoted a replica, or slots moved) is data
// loss. The decisions themselves carry nothing extra: detection costs no
// round trip per decision. A probe that fails (the node is down) is
// skipped; the next that succeeds compares.
//
// A single key evicted under maxmemory-policy, or expired, is not
// detected: it is a whole budget again, as an absent key always is. With a
// client that is not a *redis.Client, *redis.ClusterClient or *redis.Ring,
// or with Config.DataLossInterval negative, nothing is probed and f is
// never called. After Close, OnDataLoss does nothing.
func (s *Store) OnDataLoss(f func()) (stop func()) {
	if f == nil {
		return func() {}
	}
	return s.loss.listen(f)
}

// ErrDataLossUnknown: CheckDataLoss could not tell whether the store's
// data was lost (no node answered its probe, or the store cannot be
// probed).
var ErrDataLossUnknown = errors.New("redisstore: cannot tell whether Redis kept its data")

// CheckDataLoss probes every node now, under ctx, as the OnDataLoss loop
// does each Config.DataLossInterval, and, when a node lost its data since
// the last probe, calls the OnDataLoss listeners before it returns. It
// fails with ErrDataLossUnknown when no node answered, when the store
// cannot be probed (a client that is not a *redis.Client,
// *redis.ClusterClient or *redis.Ring, or Config.DataLossInterval
// negative), or after Close. A caller about to write what it learnt from
// Redis before an outage (package limiter/guard, repaying the fail-open
// fallback's debts) calls it first, so that a restart or a flush during
// the outage is known before the write, not up to an interval after.
// Nodes that did not answer are compared at their next probe.
func (s *Store) CheckDataLoss(ctx context.Context) error {
	return s.loss.check(ctx)
}

// observation is what one probe of one node found.
type observation struct {
	node  string // its address; "" for the one server of a *redis.Client
	runID string
	epoch string // the epoch key's value after SET NX
}

// nodeState is what a node looked like when last probed.
type nodeState struct{ runID, epoch string }

// lossTracker is the pure core of detection: it remembers each node's
// run_id and epoch token and says which observations show data loss.
type lossTracker struct {
	nodes  map[string]nodeState
	primed bool // a round has succeeded: a node seen for the first time now is new
}

// observe records a round of observations (those of the nodes that
// answered) and returns why each node whose data was lost is counted so,
// in the observations' order: empty when nothing was lost.
func (t *lossTracker) observe(obs []observation) []string {
	if t.nodes == nil {
		t.nodes = make(map[string]nodeState)
	}
	var lost []string
	for _, o := range obs {
		old, known := t.nodes[o.node]
		t.nodes[o.node] = nodeState{o.runID, o.epoch}
		switch {
		case !known && t.primed:
			lost = append(lost, fmt.Sprintf("node %q is new (a failover or a slot move)", o.node))
		case !known:
		case old.runID != o.runID:
			lost = append(lost, fmt.Sprintf("node %q restarted or was replaced (run_id %s, was %s)", o.node, o.runID, old.runID))
		case old.epoch != o.epoch:
			lost = append(lost, fmt.Sprintf("node %q lost its epoch key (flushed)", o.node))
		}
	}
	if len(obs) > 0 {
		t.primed = true
	}
	return lost
}

// prober probes every node of a client once.
type prober func(ctx context.Context) []observation

// lossDetector runs the probe loop for OnDataLoss and calls the listeners.
type lossDetector struct {
	interval time.Duration // negative: never probe
	probe    prober        // nil: the client cannot be probed
	// tick, when set before the first listener, drives the loop instead of
	// a ticker (tests).
	tick <-chan time.Time
	// onRound, when set, sees each round's findings after the listeners
	// have heard them (tests).
	onRound func(lost []string)

	mu        sync.Mutex
	listeners map[uint64]func()
	nextID    uint64
	loop      *periodic.Loop // started by the first listener
	closed    bool

	// turn makes the rounds of the loop and of check one at a time (a
	// channel, so that check waits for it no longer than its ctx).
	turn chan struct{}
	// checks counts the rounds of check still running (close waits).
	checks  sync.WaitGroup
	tracker lossTracker // the round's that holds turn
}

func (d *lossDetector) listen(f func()) (stop func()) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed || d.probe == nil || d.interval < 0 {
		return func() {}
	}
	if d.listeners == nil {
		d.listeners = make(map[uint64]func())
	}
	id := d.nextID
	d.nextID++
	d.listeners[id] = f
	if d.loop == nil {
		d.loop = periodic.New(d.interval, d.tick)
		go d.run()
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			d.mu.Lock()
			delete(d.listeners, id)
			d.mu.Unlock()
		})
	}
}

// run is the probe goroutine, started by the first listener and stopped
// by close. Its first round, at once, sets the baseline: a loss is found
// only against a round before it, so the sooner the better.
func (d *lossDetector) run() {
	d.round()
	d.loop.Run(d.round)
}

// round probes every node once, bounded by the interval, and tells the
// listeners if any node lost data.
func (d *lossDetector) round() {
	ctx, cancel := context.WithTimeout(context.Background(), max(d.interval, MinDataLossInterval))
	defer cancel()
	d.probeRound(ctx)
}

// check is a round under ctx, outside the loop (CheckDataLoss).
//
// A go-redis client without ContextTimeoutEnabled waits for its own
// ReadTimeout, not ctx's deadline, so the round runs in a goroutine of
// its own (close waits for it) and check returns when ctx ends; the round
// still reports what it finds when the node answers.
func (d *lossDetector) check(ctx context.Context) error {
	d.mu.Lock()
	off := d.closed || d.probe == nil || d.interval < 0
	if !off {
		d.checks.Add(1)
	}
	d.mu.Unlock()
	if off {
		return ErrDataLossUnknown
	}
	answered := make(chan int, 1)
	go func() {
		defer d.checks.Done()
		answered <- d.probeRound(ctx)
	}()
	select {
	case n := <-answered:
		if n == 0 {
			return ErrDataLossUnknown
		}
		return nil
	case <-ctx.Done():
		return ErrDataLossUnknown
	}
}

// probeRound probes every node once under ctx, tells the listeners if any
// node lost data, and returns how many nodes answered.
func (d *lossDetector) probeRound(ctx context.Context) int {
	d.mu.Lock()
	if d.turn == nil {
		d.turn = make(chan struct{}, 1)
	}
	turn := d.turn
	d.mu.Unlock()
	select {
	case turn <- struct{}{}:
	case <-ctx.Done():
		return 0
	}
	defer func() { <-turn }()
	obs := d.probe(ctx)
	lost := d.tracker.observe(obs)
	if len(lost) > 0 {
		d.mu.Lock()
		fs := make([]func(), 0, len(d.listeners))
		for _, f := range d.listeners {
			fs = append(fs, f)
		}
		d.mu.Unlock()
		for _, f := range fs {
			f()
		}
	}
	// Last, so that a test that waits for the round sees its listeners run.
	if d.onRound != nil {
		d.onRound(lost)
	}
	return len(obs)
}

// close stops the probe goroutine, after a round in progress.
func (d *lossDetector) close() {
	d.mu.Lock()
	d.closed = true
	loop := d.loop
	d.listeners = nil
	d.mu.Unlock()
	if loop != nil {
		loop.Stop()
	}
	d.checks.Wait()
}

// proberFor returns how to probe client's nodes for the store's epoch
// keys, or nil for a client it cannot reach node by node.
func proberFor(client redis.Scripter, prefix string) prober {
	switch c := client.(type) {
	case *redis.Client:
		key := prefix + ":" + epochName
		return func(ctx context.Context) []observation {
			o, err := probeNode(ctx, c, "", key)
			if err != nil {
				return nil
			}
			return []observation{o}
		}
	case *redis.Ring:
		key := prefix + ":" + epochName
		return func(ctx context.Context) []observation {
			var mu sync.Mutex
			var obs []observation
			_ = c.ForEachShard(ctx, func(ctx context.Context, shard *redis.Client) error {
				o, err := probeNode(ctx, shard, shard.Options().Addr, key)
				if err == nil {
					mu.Lock()
					obs = append(obs, o)
					mu.Unlock()
				}
				return nil
			})
			return obs
		}
	case *redis.ClusterClient:
		keys := &clusterEpochKeys{prefix: prefix, byNode: make(map[string]string)}
		return func(ctx context.Context) []observation {
			var mu sync.Mutex
			var obs []observation
			_ = c.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
				o, err := keys.probe(ctx, node)
				if err == nil {
					mu.Lock()
					obs = append(obs, o)
					mu.Unlock()
				}
				return nil
			})
			return obs
		}
	}
	return nil
}

// newEpochToken is a token no other probe, process or data set will draw.
func newEpochToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand crashes the program instead)
	return hex.EncodeToString(b[:])
}

// probeNode is one round trip to one node: INFO server, SET key token NX,
// GET key. The token read back is whichever probe's SET came first on this
// data set. Each probe draws a fresh token, so a data set that lost the
// key never shows the token seen before, even to the probe that set it.
func probeNode(ctx context.Context, node *redis.Client, addr, key string) (observation, error) {
	token := newEpochToken()
	var info *redis.StringCmd
	var get *redis.StringCmd
	_, err := node.Pipelined(ctx, func(p redis.Pipeliner) error {
		info = p.Info(ctx, "server")
		p.SetNX(ctx, key, token, 0)
		get = p.Get(ctx, key)
		return nil
	})
	if err != nil {
		return observation{}, err
	}
	runID, ok := infoField(info.Val(), "run_id")
	if !ok {
		return observation{}, errors.New("redisstore: INFO server without run_id")
	}
	return observation{node: addr, runID: runID, epoch: get.Val()}, nil
}

// infoField returns field's value in an INFO reply.
func infoField(info, field string) (string, bool) {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return strings.TrimRight(v, "\r\n"), true
		}
	}
	return "", false
}

// clusterEpochKeys names each Cluster master's epoch key: on a Cluster a
// node takes only keys of its own slots, so the key's hash tag is chosen
// to fall in one of them (read from CLUSTER NODES, once per node and again
// after the node refused the key).
type clusterEpochKeys struct {
	prefix string
	mu     sync.Mutex
	byNode map[string]string
}

func (k *clusterEpochKeys) probe(ctx context.Context, node *redis.Client) (observation, error) {
	addr := node.Options().Addr
	k.mu.Lock()
	key := k.byNode[addr]
	k.mu.Unlock()
	if key == "" {
		s, err := ownSlot(ctx, node)
		if err != nil {
			return observation{}, err
		}
		key = k.prefix + ":{" + tagInSlot(s) + "}:" + epochName
		k.mu.Lock()
		k.byNode[addr] = key
		k.mu.Unlock()
	}
	o, err := probeNode(ctx, node, addr, key)
	if err != nil && (redis.HasErrorPrefix(err, "MOVED") || redis.HasErrorPrefix(err, "ASK")) {
		k.mu.Lock()
		delete(k.byNode, addr) // the slot moved: choose again next round
		k.mu.Unlock()
	}
	return o, err
}

// ownSlot returns a slot node serves, from the "myself" line of CLUSTER
// NODES: its ninth field on are slot ranges ("0-5460", "5461"), or
// migration markers in brackets, which are skipped.
func ownSlot(ctx context.Context, node *redis.Client) (uint16, error) {
	nodes, err := node.ClusterNodes(ctx).Result()
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(nodes) {
		f := strings.Fields(line)
		if len(f) < 9 || !strings.Contains(f[2], "myself") {
			continue
		}
		for _, r := range f[8:] {
			first, _, _ := strings.Cut(r, "-")
			if n, err := strconv.ParseUint(first, 10, 16); err == nil && n < clusterSlots {
				return uint16(n), nil
			}
		}
	}
	return 0, errors.New("redisstore: CLUSTER NODES shows no slot of this node")
}

// tagInSlot returns the first of "%e0", "%e1", … that hashes to slot s.
// Every slot has one among the first few hundred thousand; the search
// runs once per node.
func tagInSlot(s uint16) string {
	for i := 0; ; i++ {
		t := "%e" + strconv.Itoa(i)
		if slot(t) == s {
			return t
		}
	}
}
