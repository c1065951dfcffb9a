package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
)

// The callgrind group counts the instructions redis-server executes per
// decision, under valgrind's callgrind: where seconds on a shared machine
// are noisy, the count moves by a percent or two between runs (what still
// varies depends on time: Redis's timers, keys expiring). It is opt-in
// (-only callgrind) because it needs valgrind and a redis-server of its
// own, many times slower.

// callgrindKeys is smaller than -keys so that warming every key up under
// valgrind stays short.
const callgrindKeys = 1_000

const (
	callgrindReadyTimeout   = 60 * time.Second
	callgrindControlTimeout = 30 * time.Second
	// callgrindDecideTimeout bounds one warm-up or measured loop, so that a
	// stalled server cannot hang the bench.
	callgrindDecideTimeout = 5 * time.Minute
	// Files in the server's private directory: the dumps (callgrind adds
	// ".<n>" per dump) and vgdb's FIFOs, which would be left in /tmp when
	// the server is killed.
	callgrindOutName  = "callgrind.out"
	callgrindVgdbName = "vgdb"
)

// callgrindStep is one measured loop: callers goroutines making perCaller
// decisions each. The counts are fixed, not timed, so that every run
// measures the same work.
type callgrindStep struct {
	callers, perCaller int
}

var callgrindSteps = []callgrindStep{{callers: 1, perCaller: 2_000}, {callers: 8, perCaller: 500}, {callers: maxCallers, perCaller: 100}}

// callgrindTools are the programs the group runs (startRedis finds
// redis-server itself).
type callgrindTools struct {
	valgrind, control string
}

// findCallgrindTools looks the group's programs up on PATH, naming the one
// missing and its package.
func findCallgrindTools() (callgrindTools, error) {
	var t callgrindTools
	for _, tool := range []struct {
		name, pkg string
		path      *string
	}{
		{"valgrind", "valgrind", &t.valgrind},
		{"callgrind_control", "valgrind", &t.control},
		{"redis-server", "redis-server", new(string)},
	} {
		p, err := exec.LookPath(tool.name)
		if err != nil {
			return t, fmt.Errorf("bench: -only callgrind needs %s, not found on PATH (Debian: apt-get install -y %s): %w", tool.name, tool.pkg, err)
		}
		*tool.path = p
	}
	return t, nil
}

// callgrindResults are the group's measurements.
type callgrindResults struct {
	redisVersion string
	keys         int
	rows         []callgrindComparison
}

// callgrindComparison is ours against theirs at one callers count.
type callgrindComparison struct {
	callers    int
	decisions  int // per contender
	ours, peer callgrindTally
}

// callgrindTally is one contender's measured loop. err, when set, is why
// it has no figures.
type callgrindTally struct {
	name         string
	decisions    int64
	instructions int64
	scripts      int64
	err          error
}

// perDecision is n ÷ decisions, or -1 when there is no measurement.
func (t callgrindTally) perDecision(n int64) float64 {
	if t.err != nil || t.decisions == 0 {
		return -1
	}
	return float64(n) / float64(t.decisions)
}

// perDecisionRatio is ours ÷ theirs of a per-decision figure, 0 when
// either is missing.
func perDecisionRatio(ours, theirs float64) float64 {
	if ours < 0 || theirs <= 0 {
		return 0
	}
	return ours / theirs
}

func (e *env) callgrindWorkloads(ctx context.Context, rep *report) error {
	return e.measureCallgrind(ctx, rep, callgrindSteps)
}

// measureCallgrind runs steps for costguard's Redis stack and redis_rate,
// each on a client of its own, against a redis-server of its own under
// callgrind (whatever -redis says: it must be the one instrumented).
func (e *env) measureCallgrind(ctx context.Context, rep *report, steps []callgrindStep) (err error) {
	tools, err := findCallgrindTools()
	if err != nil {
		return err
	}
	e.logf("callgrind: starting redis-server under valgrind")
	srv, err := startCallgrindRedis(ctx, tools)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, srv.Close()) }()

	admin := newClient(srv.addr)
	oursClient, peerClient := newClient(srv.addr), newClient(srv.addr)
	defer admin.Close()
	defer oursClient.Close()
	defer peerClient.Close()
	ours, err := newOursRedis(oursClient, e.prefix)
	if err != nil {
		return err
	}
	peer := redis_rate.NewLimiter(peerClient)
	// Our store prefixes keys itself; redis_rate adds "rate:" only.
	cs := []contender{
		{name: "costguard", decide: storeDecide(ours, admittedLimit), keys: keyNames("", callgrindKeys)},
		{name: "redis_rate", decide: redisRateDecide(peer, admittedLimit), keys: keyNames(e.prefix+":", callgrindKeys)},
	}

	res := &callgrindResults{redisVersion: srv.version, keys: callgrindKeys}
	rep.callgrind = res
	for _, step := range steps {
		row := callgrindComparison{callers: step.callers, decisions: step.callers * step.perCaller}
		for i, c := range cs {
			e.logf("callgrind: %s, %s × %d decisions", c.name, callersText(step.callers), step.perCaller)
			t, err := srv.measure(ctx, admin, c, step)
			if ctx.Err() != nil { // whatever failed, the cause is the interruption
				return fmt.Errorf("bench: interrupted: %w", ctx.Err())
			}
			if err != nil {
				return err
			}
			if i == 0 {
				row.ours = t
			} else {
				row.peer = t
			}
		}
		res.rows = append(res.rows, row)
	}
	return nil
}

// callgrindServer is a redis-server running under callgrind with its
// instrumentation off until measure switches it on.
type callgrindServer struct {
	*redisServer
	control  string // callgrind_control's path
	lastDump int    // the number of the last dump read
}

func startCallgrindRedis(ctx context.Context, tools callgrindTools) (*callgrindServer, error) {
	srv, err := startRedis(ctx, &redisWrapper{
		command: func(dir string) []string {
			return []string{tools.valgrind, "--tool=callgrind", "--instr-atstart=no",
				"--vgdb-prefix=" + filepath.Join(dir, callgrindVgdbName),
				"--callgrind-out-file=" + filepath.Join(dir, callgrindOutName)}
		},
		readyTimeout: callgrindReadyTimeout,
	})
	if err != nil {
		return nil, err
	}
	return &callgrindServer{redisServer: srv, control: tools.control}, nil
}

// measure warms c up with the instrumentation off (every key used, scripts
// loaded, connections open), then counts the instructions of one step's
// decisions. Script calls are read outside the instrumented window, so
// INFO costs nothing there. A decision that fails or is rejected spoils
// only this tally; a failure of callgrind itself is returned.
func (s *callgrindServer) measure(ctx context.Context, admin redis.UniversalClient, c contender, step callgrindStep) (callgrindTally, error) {
	t := callgrindTally{name: c.name}
	warmPerCaller := (len(c.keys) + step.callers - 1) / step.callers
	if err := decideFixed(ctx, c, step.callers, warmPerCaller, warmPerCaller); err != nil {
		t.err = fmt.Errorf("warm-up: %w", err)
		return t, nil
	}
	scriptsBefore, err := countScriptCalls(ctx, admin)
	if err != nil {
		return t, err
	}
	if err := s.callgrindControl(ctx, "-z"); err != nil {
		return t, err
	}
	if err := s.callgrindControl(ctx, "-i", "on"); err != nil {
		return t, err
	}
	// Spread the callers over the keys as run does.
	decideErr := decideFixed(ctx, c, step.callers, step.perCaller, 7919)
	if err := s.callgrindControl(ctx, "-i", "off"); err != nil {
		return t, err
	}
	if decideErr != nil {
		t.err = decideErr
		return t, nil
	}
	scriptsAfter, err := countScriptCalls(ctx, admin)
	if err != nil {
		return t, err
	}
	if err := s.callgrindControl(ctx, "-d"); err != nil {
		return t, err
	}
	path, n, err := newestDump(s.dir)
	if err != nil {
		return t, err
	}
	if n <= s.lastDump {
		return t, fmt.Errorf("bench: callgrind_control -d wrote no new dump in %s (newest: %s)", s.dir, path)
	}
	s.lastDump = n
	if t.instructions, err = readDumpInstructions(path); err != nil {
		return t, err
	}
	t.decisions = int64(step.callers * step.perCaller)
	t.scripts = scriptsAfter - scriptsBefore
	return t, nil
}

// callgrindControl runs callgrind_control with args on this server. It
// exits 0 even when it finds no such process, so success is read from its
// output: the process's "PID <pid>:" line, then "OK.".
func (s *callgrindServer) callgrindControl(ctx context.Context, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, callgrindControlTimeout)
	defer cancel()
	pid := strconv.Itoa(s.cmd.Process.Pid)
	argv := append([]string{"--vgdb-prefix=" + filepath.Join(s.dir, callgrindVgdbName)}, args...)
	out, err := exec.CommandContext(ctx, s.control, append(argv, pid)...).CombinedOutput()
	if err == nil && (!strings.Contains(string(out), "PID "+pid+":") || !strings.Contains(string(out), "OK.")) {
		err = errors.New("no such callgrind process")
	}
	if err != nil {
		return fmt.Errorf("bench: callgrind_control %s %s: %w\n%s", strings.Join(args, " "), pid, err, out)
	}
	return nil
}

// decideFixed has callers goroutines make perCaller decisions each with c,
// caller w going through c.keys in order from key w×stride. Every decision
// must be admitted: it returns the first error or rejection, and stops the
// other callers then.
func decideFixed(ctx context.Context, c contender, callers, perCaller, stride int) error {
	ctx, cancel := context.WithTimeout(ctx, callgrindDecideTimeout)
	defer cancel()
	var (
		mu    sync.Mutex
		first error
		wg    sync.WaitGroup
	)
	fail := func(err error) {
		mu.Lock()
		if first == nil {
			first = err
		}
		mu.Unlock()
		cancel()
	}
	for w := range callers {
		wg.Go(func() {
			for i := range perCaller {
				key := c.keys[(w*stride+i)%len(c.keys)]
				ok, err := c.decide(ctx, key)
				if err != nil {
					fail(fmt.Errorf("%s, key %q: %w", c.name, key, err))
					return
				}
				if !ok {
					fail(fmt.Errorf("%s, key %q: rejected, but the workload admits every decision", c.name, key))
					return
				}
			}
		})
	}
	wg.Wait()
	return first
}

// newestDump returns the path and number of the callgrind.out.<n> in dir
// with the largest n, the one the last dump wrote.
func newestDump(dir string) (string, int, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", 0, fmt.Errorf("bench: callgrind dumps: %w", err)
	}
	newest, path := 0, ""
	for _, ent := range entries {
		suffix, ok := strings.CutPrefix(ent.Name(), callgrindOutName+".")
		if !ok {
			continue
		}
		if n, err := strconv.Atoi(suffix); err == nil && n > newest {
			newest, path = n, filepath.Join(dir, ent.Name())
		}
	}
	if path == "" {
		return "", 0, fmt.Errorf("bench: no %s.<n> dump in %s", callgrindOutName, dir)
	}
	return path, newest, nil
}

func readDumpInstructions(path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("bench: callgrind dump: %w", err)
	}
	defer f.Close()
	n, err := parseDumpInstructions(f)
	if err != nil {
		return 0, fmt.Errorf("bench: callgrind dump %s: %w", path, err)
	}
	return n, nil
}

// parseDumpInstructions returns the instructions (the Ir event) of a
// callgrind dump: the sum of its "totals:" lines, one per part, or, in a
// dump without them, of its "summary:" lines. totals wins because dumps
// taken on request may write "summary: 0". Each cost line lists values in
// the order of the "events:" line before it; trailing zeros may be left
// out.
func parseDumpInstructions(r io.Reader) (int64, error) {
	var (
		irColumn          = -1
		totals, summaries int64
		sawTotals, sawSum bool
	)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20) // symbol names can be long
	for sc.Scan() {
		key, rest, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		if !ok {
			continue
		}
		fields := strings.Fields(rest)
		switch key {
		case "events":
			irColumn = -1
			for i, f := range fields {
				if f == "Ir" {
					irColumn = i
				}
			}
			if irColumn < 0 {
				return 0, fmt.Errorf("no Ir among the events %q", rest)
			}
		case "totals", "summary":
			if irColumn < 0 {
				return 0, fmt.Errorf("%s: before any events: line", key)
			}
			var v int64
			if irColumn < len(fields) {
				var err error
				if v, err = strconv.ParseInt(fields[irColumn], 10, 64); err != nil || v < 0 {
					return 0, fmt.Errorf("malformed %s: line %q", key, sc.Text())
				}
			}
			if key == "totals" {
				totals, sawTotals = totals+v, true
			} else {
				summaries, sawSum = summaries+v, true
			}
		}
	}
	switch err := sc.Err(); {
	case err != nil:
		return 0, err
	case sawTotals:
		return totals, nil
	case sawSum:
		return summaries, nil
	}
	return 0, errors.New("no totals: or summary: line")
}

func (r *report) writeCallgrind(out io.Writer, notes *[]string) {
	res := r.callgrind
	var steps []string
	for _, row := range res.rows {
		steps = append(steps, fmt.Sprintf("%s decisions by %s", thousands(float64(row.decisions)), callersText(row.callers)))
	}
	fmt.Fprintln(out)
	fmt.Fprintf(out, "Redis CPU per decision (callgrind instructions; redis-server %s under valgrind; lower is better)\n", res.redisVersion)
	fmt.Fprintf(out, "All admitted, %s keys; per limiter: %s.\n", thousands(float64(res.keys)), strings.Join(steps, ", "))
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "callers\tlimiter\tinstructions/decision\tscripts/decision")
	for _, row := range res.rows {
		for i, t := range []callgrindTally{row.ours, row.peer} {
			callers := strconv.Itoa(row.callers)
			if i == 1 {
				callers = ""
			}
			instructions := "-"
			if v := t.perDecision(t.instructions); v >= 0 {
				instructions = thousands(v)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", callers, t.name, instructions, fmtPerDecision(t.perDecision(t.scripts)))
			if t.err != nil {
				*notes = append(*notes, fmt.Sprintf("callgrind, %s: %s not measured: %v", callersText(row.callers), t.name, t.err))
			}
		}
		fmt.Fprintf(tw, "\tours ÷ theirs\t%s\t%s\n",
			fmtRatio(perDecisionRatio(row.ours.perDecision(row.ours.instructions), row.peer.perDecision(row.peer.instructions))),
			fmtRatio(perDecisionRatio(row.ours.perDecision(row.ours.scripts), row.peer.perDecision(row.peer.scripts))))
	}
	tw.Flush()
}

func callersText(n int) string {
	if n == 1 {
		return "1 caller"
	}
	return strconv.Itoa(n) + " callers"
}
