package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/limiter/redisstore"
	"github.com/costguard/costguard/limiter/splitbudget"
)

// The shared-budget workload: splitProcesses worker processes, each with
// splitCallers callers, spend one key under splitLimit (a UX-grade limit,
// the kind split-budget mode is for) for -duration.
const (
	splitProcesses = 3
	splitCallers   = 8
	splitKey       = "shared"
	// splitGrace bounds the workers' start-up and reporting beyond
	// -duration; a worker still running then is killed.
	splitGrace = time.Minute
)

var splitLimit = limiter.Limit{Algorithm: limiter.TokenBucket, Burst: 100, Rate: 1000, Period: time.Second}

// splitKind is one store the shared-budget workload runs on.
type splitKind struct {
	name, desc string
	// exact stores must never overshoot; the JSON's split_overshoot_pct
	// reports the one that is not.
	exact bool
	build func(rdb redis.UniversalClient, prefix string) (limiter.Store, error)
}

// splitKinds are the stores measured across processes. The exact Redis
// store is the control: it must show no overshoot, which checks the
// harness as much as the store.
var splitKinds = []splitKind{
	{name: "exact", desc: "redisstore (exact)", exact: true, build: func(rdb redis.UniversalClient, prefix string) (limiter.Store, error) {
		return redisstore.New(rdb, redisstore.Config{Prefix: prefix})
	}},
	{name: "split", desc: "splitbudget over redisstore", build: func(rdb redis.UniversalClient, prefix string) (limiter.Store, error) {
		rs, err := redisstore.New(rdb, redisstore.Config{Prefix: prefix})
		if err != nil {
			return nil, err
		}
		return splitbudget.New(rs, splitbudget.Config{})
	}},
}

func findSplitKind(name string) (splitKind, bool) {
	for _, k := range splitKinds {
		if k.name == name {
			return k, true
		}
	}
	return splitKind{}, false
}

// childOptions are a split-budget worker's flags.
type childOptions struct {
	prefix  string
	callers int
}

// childResult is what a worker prints as its last line.
type childResult struct {
	Decisions int64  `json:"decisions"`
	Admitted  int64  `json:"admitted"`
	Errors    int64  `json:"errors"`
	FirstErr  string `json:"first_error,omitempty"`
	Start     int64  `json:"start_unix_nano"` // before its first decision
	End       int64  `json:"end_unix_nano"`   // after its last one
	// PerSlot counts admissions per SlotNS since Start.
	SlotNS  int64   `json:"slot_ns"`
	PerSlot []int64 `json:"admitted_per_slot"`
	// LeaseSize is the store's lease for splitLimit; 0 for exact stores.
	LeaseSize int64 `json:"lease_size"`
}

// splitSlot is the resolution of the windows the overshoot is looked for
// in: 1 ms, coarser for runs over 100 s so a worker reports at most
// 100,000 slots.
func splitSlot(d time.Duration) time.Duration {
	return max(time.Millisecond, d/100_000)
}

// runChild is a split-budget worker: it builds its store, prints "ready",
// waits for a line on stdin, spends the shared key for -duration and
// prints a childResult.
func runChild(ctx context.Context, o options, stdin io.Reader, stdout io.Writer) error {
	kind, ok := findSplitKind(o.childKind)
	switch {
	case !ok:
		return fmt.Errorf("bench: unknown worker kind %q", o.childKind)
	case o.redisAddr == "" || o.child.prefix == "" || o.child.callers < 1:
		return errors.New("bench: a worker needs -redis, -child-prefix and -child-callers")
	}
	rdb := newClient(o.redisAddr)
	defer rdb.Close()
	store, err := kind.build(rdb, o.child.prefix)
	if err != nil {
		return err
	}
	if c, ok := store.(io.Closer); ok {
		defer c.Close()
	}
	if err := rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("bench: worker: redis %s: %w", o.redisAddr, err)
	}
	fmt.Fprintln(stdout, "ready")
	if _, err := bufio.NewReader(stdin).ReadString('\n'); err != nil {
		return fmt.Errorf("bench: worker: waiting for the start: %w", err)
	}
	slot := splitSlot(o.duration)
	t := run(ctx, contender{decide: storeDecide(store, splitLimit), keys: []string{splitKey}},
		runSpec{callers: o.child.callers, d: o.duration, slot: slot})
	r := childResult{
		Decisions: t.decisions, Admitted: t.admitted, Errors: t.errors,
		Start: t.from.UnixNano(), End: t.to.UnixNano(), SlotNS: int64(slot), PerSlot: t.perSlot,
	}
	if t.firstErr != nil {
		r.FirstErr = t.firstErr.Error()
	}
	if l, ok := store.(interface{ LeaseSize(limiter.Limit) int64 }); ok {
		r.LeaseSize = l.LeaseSize(splitLimit)
	}
	return json.NewEncoder(stdout).Encode(r)
}

// splitResult is one shared-budget run across the worker processes.
type splitResult struct {
	kind      splitKind
	decisions int64
	admitted  int64
	errors    int64
	firstErr  string
	span      time.Duration // first worker's start to last worker's end
	slot      time.Duration
	perSlot   []int64 // admissions of all workers, by slot since the first start
	leaseSize int64   // per process; 0 for exact stores
}

// allowed is the most an exact token bucket admits over the span: a full
// bucket, then the refill.
func (r splitResult) allowed() float64 {
	return float64(splitLimit.Burst) + float64(splitLimit.Rate)*r.span.Seconds()/splitLimit.Period.Seconds()
}

// overshootPct is how far the admissions went past allowed, in percent of
// it (negative: below).
func (r splitResult) overshootPct() float64 {
	a := r.allowed()
	return (float64(r.admitted) - a) / a * 100
}

// worstWindow finds the window of whole slots whose admissions most exceed
// what an exact bucket allows in it, Burst + Rate × length: it returns
// that excess in tokens (≤ 0: none) and the window's length. Admissions
// are placed by when their answer returned, so network jitter alone can
// show a small excess: the exact control measures that noise floor.
func (r splitResult) worstWindow() (excess float64, length time.Duration) {
	// Maximise (P_j − c·j) − (P_i − c·i) over i < j, where P is the prefix
	// sum of admissions and c the refill per slot.
	c := float64(splitLimit.Rate) * r.slot.Seconds() / splitLimit.Period.Seconds()
	excess = math.Inf(-1)
	var prefix int64
	minV, minAt := 0.0, 0 // min of P_i − c·i so far, at i = 0 first
	for j, n := range r.perSlot {
		prefix += n
		v := float64(prefix) - c*float64(j+1)
		if e := v - minV; e > excess {
			excess, length = e, time.Duration(j+1-minAt)*r.slot
		}
		if v < minV {
			minV, minAt = v, j+1
		}
	}
	if math.IsInf(excess, -1) {
		return 0, 0
	}
	return excess - float64(splitLimit.Burst), length
}

func (e *env) splitWorkloads(ctx context.Context, rep *report) error {
	for _, k := range splitKinds {
		e.logf("shared budget (%s), %d processes × %d callers: %v", k.name, splitProcesses, splitCallers, e.opts.duration)
		r, err := e.runSplit(ctx, k)
		if err != nil {
			return err
		}
		rep.split = append(rep.split, r)
	}
	return nil
}

// worker is one running split-budget worker process.
type worker struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Scanner
}

// runSplit starts the workers, releases them together and adds up what
// they report. Every step is bounded by -duration plus splitGrace.
func (e *env) runSplit(ctx context.Context, k splitKind) (splitResult, error) {
	res := splitResult{kind: k}
	exe, err := os.Executable()
	if err != nil {
		return res, fmt.Errorf("bench: find own executable: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, e.opts.duration+splitGrace)
	defer cancel()
	workers := make([]*worker, 0, splitProcesses)
	defer func() {
		for _, w := range workers { // on an early return: stop them all
			_ = w.cmd.Process.Kill()
			_ = w.cmd.Wait()
		}
	}()
	for range splitProcesses {
		cmd := exec.CommandContext(ctx, exe,
			"-child", k.name,
			"-redis", e.addr,
			"-duration", e.opts.duration.String(),
			"-child-prefix", e.prefix+":split-"+k.name,
			"-child-callers", strconv.Itoa(splitCallers),
		)
		cmd.Stderr = e.log
		cmd.SysProcAttr = sysProcAttr()
		in, err := cmd.StdinPipe()
		if err != nil {
			return res, fmt.Errorf("bench: worker stdin: %w", err)
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			return res, fmt.Errorf("bench: worker stdout: %w", err)
		}
		if err := cmd.Start(); err != nil {
			return res, fmt.Errorf("bench: start worker: %w", err)
		}
		workers = append(workers, &worker{cmd: cmd, in: in, out: bufio.NewScanner(out)})
	}
	for _, w := range workers {
		if line, err := w.line(); err != nil || line != "ready" {
			return res, fmt.Errorf("bench: worker %d did not get ready (%q): %w", w.cmd.Process.Pid, line, err)
		}
	}
	for _, w := range workers {
		if _, err := io.WriteString(w.in, "go\n"); err != nil {
			return res, fmt.Errorf("bench: start worker %d: %w", w.cmd.Process.Pid, err)
		}
	}
	var (
		first, last int64
		results     []childResult
	)
	for i, w := range workers {
		line, err := w.line()
		if err != nil {
			return res, fmt.Errorf("bench: worker %d: %w", w.cmd.Process.Pid, err)
		}
		var r childResult
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			return res, fmt.Errorf("bench: worker %d printed %q: %w", w.cmd.Process.Pid, line, err)
		}
		res.decisions += r.Decisions
		res.admitted += r.Admitted
		res.errors += r.Errors
		if res.firstErr == "" {
			res.firstErr = r.FirstErr
		}
		if i == 0 || r.Start < first {
			first = r.Start
		}
		last = max(last, r.End)
		res.leaseSize = max(res.leaseSize, r.LeaseSize)
		results = append(results, r)
	}
	res.span = time.Duration(last - first)
	res.slot = splitSlot(e.opts.duration)
	for _, r := range results {
		res.perSlot = addSlots(res.perSlot, r.PerSlot, int(time.Duration(r.Start-first)/res.slot))
	}
	for _, w := range workers {
		_ = w.in.Close()
		if err := w.cmd.Wait(); err != nil {
			return res, fmt.Errorf("bench: worker %d: %w", w.cmd.Process.Pid, err)
		}
	}
	workers = workers[:0]
	return res, nil
}

// line reads the worker's next line of output.
func (w *worker) line() (string, error) {
	if w.out.Scan() {
		return strings.TrimSpace(w.out.Text()), nil
	}
	if err := w.out.Err(); err != nil {
		return "", err
	}
	return "", io.ErrUnexpectedEOF
}
