// Command bench measures costguard's limiters side by side with their
// peers, on one machine, against one Redis, in one run:
//
//   - the Redis path, every decision admitted: decisions/s, p50 and p99 at
//     1, 8 and 64 concurrent callers over 10,000 keys, costguard's Redis
//     store (behind its over-limit cache) against go-redis/redis_rate v10
//     AllowN;
//   - the scrape bot: 64 callers on one key with a small budget, nearly
//     everything rejected, the same two limiters;
//   - Redis script calls per decision for each, from INFO commandstats
//     deltas, and the client's round trips per decision;
//   - the memory store against golang.org/x/time/rate (one Limiter per key
//     in a map behind a mutex) on the all-admitted workload;
//   - the overshoot of a budget shared by 3 processes: the bench re-executes
//     itself as 3 worker processes spending one key together, through the
//     exact Redis store (the control) and through the split-budget store;
//   - opt-in (-only callgrind, needs valgrind): Redis's own CPU per decision
//     as instructions counted by valgrind's callgrind, in a redis-server of
//     its own, the same two limiters at 1 and 64 callers.
//
// Contenders run in interleaved rounds (ours, theirs, theirs, ours, …), so
// drift in the machine's load hits both alike. The bench prints a table and,
// as its last line, one JSON object:
//
//	{"admitted_speedup_64": X, "bot_speedup": Y, "round_trips_per_decision_64": Z, "memory_vs_xtime": W, "split_overshoot_pct": V}
//
// Speedups are ours ÷ theirs in decisions/s; a value that could not be
// measured is null. BENCHMARKS.md explains each number.
//
// Usage, from the repository root (go.work makes ./bench resolvable there):
//
//	go run ./bench                                   # starts its own redis-server
//	go run ./bench -redis 127.0.0.1:6379 -duration 5s
//	go run ./bench -only redis,callgrind
//	go run ./bench -only pricing,overhead -github-schema path/to/schema.docs.graphql
//	go run ./bench -only overhead -instructions      # and instructions per request (valgrind)
//	go run ./bench -only clients                     # 1m per client kind
//
// The in-process groups pricing (pricing one operation on GitHub's public
// schema: from scratch, from a compiled plan, and gqlgen's
// complexity.Calculate) and overhead (the limiter's end-to-end overhead
// over bare gqlgen and over the hand-made stack, diy) are opt-in, need no
// Redis, and print their own tables and, as the last line,
//
//	{"pricing_defaults_vs_gqlgen_max": D, "pricing_scratch_vs_gqlgen_max": X, "pricing_plan_vs_gqlgen_max": Y, "overhead_readme_pct": Z, "overhead_one_field_pct": W,
//	 "overhead_vs_diy_one_field": …, "overhead_vs_diy_readme": …, "overhead_vs_diy_one_field_instructions": …,
//	 "overhead_vs_diy_readme_instructions": …, "allocs_over_diy_one_field": …, "allocs_over_diy_readme": …}
//
// The opt-in clients group (-only clients) runs alone, without Redis: 20
// clients sharing one API key of the example schema's server in this
// process, demanding three times what its plan refills, for -duration (1m
// when not given), once with naive clients (a refusal resent at once) and
// once with the pacing transport of package client; it prints its own
// table and, as the last line,
//
//	{"clients": 20, "duration_s": 60, …, "naive": {"sent": …, "refused_pct": …, "goodput_pct": …, "early_sends": …, "mutation_retries": …, …}, "paced": {…}}
//
// Without -redis the bench starts a throwaway redis-server on a free
// loopback port and removes it at exit. With -redis it writes only keys
// under a random prefix of its own and deletes exactly those at exit; it
// never flushes anything. The script-call figures read server-wide
// counters, so they are exact only when nothing else runs scripts on that
// Redis.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

func main() {
	if err := runMain(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// workloadGroups are the values -only accepts.
var workloadGroups = []string{"redis", "memory", "split", "callgrind", "overload", "pricing", "overhead", "clients"}

// options are the command-line flags.
type options struct {
	redisAddr string
	only      map[string]bool // the workload groups to run
	duration  time.Duration
	rounds    int
	keys      int
	cluster   bool // the redis group also runs the store on a Cluster
	// childKind, when set, makes this process a split-budget worker of
	// that store kind (internal: the bench starts them itself).
	childKind string
	child     childOptions
	// overload shapes the overload scenario (-only overload).
	overload overloadSpec
	// clients shapes the clients scenario (-only clients).
	clients clientsSpec
	// githubSchema is the SDL file of GitHub's public schema, for the
	// pricing group (empty: the group is skipped).
	githubSchema string
	// cpuProfile, when set, receives a CPU profile of the in-process
	// groups.
	cpuProfile string
	// instructions has the overhead group count each handler's
	// instructions per request under callgrind.
	instructions bool
	// overheadChild, when set, makes this process serve overheadRequests
	// requests of one overhead handler for a counting parent (internal).
	overheadChild    string
	overheadRequests int
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.githubSchema, "github-schema", "", "pricing: `path` of GitHub's public schema (SDL); empty: the pricing group is skipped")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "pricing, overhead: write a CPU profile of the run to `file`")
	fs.BoolVar(&o.instructions, "instructions", false, "overhead: also count each handler's instructions per request under callgrind with GOGC=off (needs valgrind; minutes)")
	fs.StringVar(&o.overheadChild, overheadChildFlag, "", "internal: serve requests of one overhead `query/handler` for a counting parent")
	fs.IntVar(&o.overheadRequests, "overhead-requests", overheadCountRequests, "internal: requests an overhead child serves")
	fs.StringVar(&o.redisAddr, "redis", "", "`host:port` of a Redis to use (only keys under a random prefix are written, and deleted at exit); empty: start a throwaway redis-server")
	fs.DurationVar(&o.duration, "duration", 5*time.Second, "measured time per limiter per workload, split over the rounds")
	fs.IntVar(&o.rounds, "rounds", 5, "interleaved rounds per workload")
	fs.IntVar(&o.keys, "keys", 10_000, "distinct keys of the all-admitted workloads")
	fs.BoolVar(&o.cluster, "cluster", true, "redis: also run the store on a throwaway 3-master Cluster (needs redis-server and redis-cli on PATH)")
	only := fs.String("only", "redis,memory,split", "comma-separated workload groups to run: redis, memory, split, and the opt-in callgrind (Redis instructions per decision under valgrind; always its own redis-server); the JSON reports null for those not run. The opt-in overload (an examples/server process at 4× its capacity, an outage, the retry wave; no Redis) runs alone, with its own table and JSON; -duration is then its loaded phase. The opt-in clients (clients sharing one API key at 3× its refill, naive against the pacing transport; no Redis) runs alone, with its own table and JSON; -duration is then each run's length, 1m when not given. The opt-in pricing (pricing on GitHub's schema, -github-schema) and overhead (the limiter's end-to-end overhead in this process) run without Redis, together or alone, with their own tables and JSON")
	fs.IntVar(&o.overload.capacity, "capacity", 8, "overload: the server's requests in flight at most (overload.max_in_flight)")
	fs.DurationVar(&o.overload.latency, "latency", 100*time.Millisecond, "overload: what each root field of the server takes (demo_latency)")
	fs.DurationVar(&o.overload.outage, "outage", 2*time.Second, "overload: how long the outage lasts after the loaded phase (emulated by the clients, which hold their attempts until it ends)")
	fs.DurationVar(&o.overload.queue, "queue", 2*time.Second, "overload: how long a checkout request may wait for a slot with lanes on (its lane's queue, the issue's 2s; 0: none)")
	fs.IntVar(&o.overload.maxQueue, "max-queue", 1024, "overload: the checkout requests that may wait at once (overload.max_queue; 0: the capacity)")
	fs.DurationVar(&o.overload.recovery, "recovery", 3*time.Second, "overload: how long the scenario goes on after the outage")
	fs.IntVar(&o.clients.clients, "clients", 20, "clients: how many clients share the one API key")
	fs.StringVar(&o.childKind, "child", "", "internal: run as a split-budget worker of the given store kind")
	fs.StringVar(&o.child.prefix, "child-prefix", "", "internal: key prefix of a split-budget worker")
	fs.IntVar(&o.child.callers, "child-callers", 0, "internal: callers of a split-budget worker")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("bench: unexpected arguments %q", fs.Args())
	}
	o.only = map[string]bool{}
	for g := range strings.SplitSeq(*only, ",") {
		if g = strings.TrimSpace(g); !slices.Contains(workloadGroups, g) {
			return o, fmt.Errorf("bench: -only: unknown workload group %q (want redis, memory, split, callgrind, overload, pricing, overhead or clients)", g)
		}
		o.only[g] = true
	}
	if o.only["overload"] {
		if len(o.only) > 1 {
			return o, fmt.Errorf("bench: -only: overload runs alone (it prints its own JSON line)")
		}
		o.overload.load = o.duration
		if err := o.overload.validate(); err != nil {
			return o, err
		}
		return o, nil
	}
	if o.only["clients"] {
		if len(o.only) > 1 {
			return o, fmt.Errorf("bench: -only: clients runs alone (it prints its own JSON line)")
		}
		o.clients.duration = clientsDefaultDuration
		fs.Visit(func(f *flag.Flag) {
			if f.Name == "duration" {
				o.clients.duration = o.duration
			}
		})
		return o, o.clients.validate()
	}
	inProcess := 0
	for _, g := range inProcessGroups {
		if o.only[g] {
			inProcess++
		}
	}
	if o.instructions && !o.only["overhead"] {
		return o, fmt.Errorf("bench: -instructions counts the overhead group's instructions: add -only overhead")
	}
	if inProcess > 0 && inProcess < len(o.only) {
		return o, fmt.Errorf("bench: -only: pricing and overhead run in this process without Redis; run them apart from the Redis groups (they print their own JSON line)")
	}
	switch {
	case o.duration <= 0:
		return o, fmt.Errorf("bench: -duration must be positive (got %v)", o.duration)
	case o.rounds < 1:
		return o, fmt.Errorf("bench: -rounds must be at least 1 (got %d)", o.rounds)
	case o.duration/time.Duration(o.rounds) < 10*time.Millisecond:
		return o, fmt.Errorf("bench: -duration %v over %d rounds leaves under 10ms per run", o.duration, o.rounds)
	case o.keys < 1:
		return o, fmt.Errorf("bench: -keys must be at least 1 (got %d)", o.keys)
	}
	return o, nil
}

func runMain(args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if o.overheadChild != "" {
		return runOverheadChild(o.overheadChild, o.overheadRequests, stdout)
	}
	if o.childKind != "" {
		return runChild(ctx, o, os.Stdin, stdout)
	}
	if o.only["overload"] {
		return runOverload(ctx, o, stdout, stderr)
	}
	if o.only["clients"] {
		return runClients(ctx, o, stdout, stderr)
	}
	if o.only["pricing"] || o.only["overhead"] {
		return runInProcess(ctx, o, stdout, stderr)
	}
	return runBench(ctx, o, stdout, stderr)
}

// env is what every workload shares.
type env struct {
	opts    options
	addr    string
	prefix  string // every key this run writes starts with it
	admin   redis.UniversalClient
	log     io.Writer
	version string
	started bool
}

func runBench(ctx context.Context, o options, stdout, stderr io.Writer) (err error) {
	// The split-budget workers' stderr is copied here from one goroutine
	// each.
	e := &env{opts: o, addr: o.redisAddr, log: &lockedWriter{w: stderr}}
	if o.only["callgrind"] { // a missing tool fails now, not after the other groups
		if _, err := findCallgrindTools(); err != nil {
			return err
		}
	}
	if e.addr == "" {
		srv, err := startRedis(ctx, nil)
		if err != nil {
			return err
		}
		defer func() { err = errors.Join(err, srv.Close()) }()
		e.addr, e.version, e.started = srv.addr, srv.version, true
	}
	e.admin = newClient(e.addr)
	defer e.admin.Close()
	if err := e.admin.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("bench: redis %s: %w", e.addr, err)
	}
	if e.version == "" {
		info, err := e.admin.Info(ctx, "server").Result()
		if err != nil {
			return fmt.Errorf("bench: redis %s: INFO server: %w", e.addr, err)
		}
		e.version = infoField(info, "redis_version")
	}
	if e.prefix, err = randomPrefix(); err != nil {
		return err
	}
	if !e.started {
		// Our keys only, even when interrupted: a fresh context, bounded.
		defer func() {
			cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			n, derr := deleteKeys(cctx, e.admin, e.prefix)
			fmt.Fprintf(stderr, "bench: deleted %d keys under %q\n", n, e.prefix)
			err = errors.Join(err, derr)
		}()
	}

	rep := &report{env: e}
	for _, g := range []struct {
		name string
		run  func(context.Context, *report) error
	}{{"redis", e.redisWorkloads}, {"memory", e.memoryWorkloads}, {"split", e.splitWorkloads}, {"callgrind", e.callgrindWorkloads}} {
		if o.only[g.name] {
			if err := g.run(ctx, rep); err != nil {
				return err
			}
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("bench: interrupted: %w", err)
		}
	}
	return rep.write(stdout)
}

// newClient is the go-redis client every contender gets its own copy of:
// a pool larger than the most callers, so no contender waits for a
// connection. ContextTimeoutEnabled makes go-redis bound socket I/O by the
// calls' deadline (without it only ReadTimeout does), as the example
// server's client is configured; the same for every contender.
func newClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, PoolSize: 2 * maxCallers, ContextTimeoutEnabled: true})
}

// newCountedClient is newClient with a hook counting its round trips.
func newCountedClient(addr string) (*redis.Client, *tripCounter) {
	c, n := newClient(addr), new(tripCounter)
	c.AddHook(n)
	return c, n
}

// randomPrefix names this run's keys: "cgbench-" and 16 hex digits, no
// glob characters, so a SCAN MATCH on it matches only this run's keys.
func randomPrefix() (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("bench: random prefix: %w", err)
	}
	return "cgbench-" + hex.EncodeToString(b[:]), nil
}

// deleteKeys unlinks every key of this run: costguard's ("<prefix>:…") and
// redis_rate's ("rate:<prefix>:…"). It returns how many it deleted.
func deleteKeys(ctx context.Context, rdb redis.UniversalClient, prefix string) (int, error) {
	total := 0
	for _, pattern := range []string{prefix + ":*", "rate:" + prefix + ":*"} {
		iter := rdb.Scan(ctx, 0, pattern, 1000).Iterator()
		batch := make([]string, 0, 500)
		flush := func() error {
			if len(batch) == 0 {
				return nil
			}
			n, err := rdb.Unlink(ctx, batch...).Result()
			total += int(n)
			batch = batch[:0]
			return err
		}
		for iter.Next(ctx) {
			if batch = append(batch, iter.Val()); len(batch) == cap(batch) {
				if err := flush(); err != nil {
					return total, fmt.Errorf("bench: delete keys: %w", err)
				}
			}
		}
		if err := errors.Join(iter.Err(), flush()); err != nil {
			return total, fmt.Errorf("bench: delete keys: %w", err)
		}
	}
	return total, nil
}

// lockedWriter serialises writes to w.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (e *env) logf(format string, args ...any) {
	fmt.Fprintf(e.log, "bench: "+format+"\n", args...)
}

func keyNames(prefix string, n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = prefix + "user:" + strconv.Itoa(i)
	}
	return keys
}

func goInfo() string {
	return fmt.Sprintf("%s %s/%s, GOMAXPROCS=%d", runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.GOMAXPROCS(0))
}
