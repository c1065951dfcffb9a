package main

// Instructions per request of the overhead group's handlers (-instructions):
// where time on a shared machine moves by tens of percent, an instruction
// count moves by a few. The bench re-executes itself under callgrind, once
// per handler and query serving n requests and once serving 2n, with the
// collector off (GOGC=off: the count is then the request's own work; the
// collector's share follows the bytes allocated, which the table reports);
// the difference ÷ n is one request, the set-up and warm-up cancelling out.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// overheadCountRequests is n: enough that the difference dwarfs what moves
// between two runs (a few thousand instructions of start-up).
const overheadCountRequests = 1_000

// overheadCountTries is how many times a run that fails is tried.
const overheadCountTries = 6

// overheadCountTimeout bounds one run under callgrind.
const overheadCountTimeout = 10 * time.Minute

// overheadChildFlag names the internal flag that makes the bench serve
// requests for a counting parent: "<query>/<handler>".
const overheadChildFlag = "overhead-child"

// countOverhead fills row.instructions, one callgrind run pair per handler.
// A missing valgrind is returned; a run that fails spoils only its handler.
func (e *inEnv) countOverhead(ctx context.Context, row *overheadResult) error {
	valgrind, err := exec.LookPath("valgrind")
	if err != nil {
		return fmt.Errorf("bench: -instructions needs valgrind, not found on PATH (Debian: apt-get install -y valgrind): %w", err)
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("bench: -instructions: %w", err)
	}
	dir, err := os.MkdirTemp("", "costguard-overhead-")
	if err != nil {
		return fmt.Errorf("bench: -instructions: %w", err)
	}
	defer os.RemoveAll(dir)
	for i, name := range handlerNames {
		e.logf("overhead %s: counting %s's instructions under callgrind", row.q.name, name)
		var counts [2]int64
		for k, n := range []int{overheadCountRequests, 2 * overheadCountRequests} {
			// Now and then the Go runtime, timing a contended lock,
			// executes RDTSCP, which valgrind 3.19 cannot run (SIGILL):
			// such a run is tried again.
			for try := 0; try < overheadCountTries; try++ {
				if counts[k], err = countRun(ctx, valgrind, self, dir, row.q.name+"/"+name, n); err == nil || ctx.Err() != nil {
					break
				}
				first, _, _ := strings.Cut(err.Error(), "\n")
				e.logf("overhead %s: %s: %s; trying again", row.q.name, name, first)
			}
			if err != nil {
				break
			}
		}
		if err != nil {
			row.insErrs[i] = err
			continue
		}
		row.instructions[i] = float64(counts[1]-counts[0]) / overheadCountRequests
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("bench: interrupted: %w", err)
		}
	}
	return nil
}

// countRun is the instructions of this program serving n requests of one
// handler under callgrind.
func countRun(ctx context.Context, valgrind, self, dir, which string, n int) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, overheadCountTimeout)
	defer cancel()
	out := filepath.Join(dir, "callgrind.out")
	cmd := exec.CommandContext(ctx, valgrind, "--tool=callgrind", "--callgrind-out-file="+out,
		self, "-"+overheadChildFlag, which, "-overhead-requests", fmt.Sprint(n))
	// Asynchronous preemption's signals would be counted as they land;
	// one P keeps the scheduler's work the same from run to run.
	cmd.Env = append(os.Environ(), "GOGC=off", "GOMAXPROCS=1", "GODEBUG=asyncpreemptoff=1")
	cmd.SysProcAttr = sysProcAttr()
	if msg, err := cmd.CombinedOutput(); err != nil {
		return 0, fmt.Errorf("callgrind %s ×%d: %w\n%s", which, n, err, programLines(string(msg), 20))
	}
	return readDumpInstructions(out)
}

// programLines is the first n lines of s that are the program's own, not
// valgrind's ("==pid== ...").
func programLines(s string, n int) string {
	var keep []string
	for line := range strings.SplitSeq(strings.TrimSpace(s), "\n") {
		if !strings.HasPrefix(line, "==") && len(keep) < n {
			keep = append(keep, line)
		}
	}
	return strings.Join(keep, "\n")
}

// runOverheadChild serves n requests of which ("<query>/<handler>") after
// one warm-up request, for a counting parent: the work of one request is
// the difference between two such runs.
func runOverheadChild(which string, n int, stdout io.Writer) error {
	qname, hname, _ := strings.Cut(which, "/")
	qi := slices.IndexFunc(overheadQueries, func(q overheadQuery) bool { return q.name == qname })
	hi := slices.Index(handlerNames[:], hname)
	if qi < 0 || hi < 0 || n < 1 {
		return fmt.Errorf("bench: -%s %q -overhead-requests %d: no such query/handler", overheadChildFlag, which, n)
	}
	hs, closeLim, err := overheadHandlers()
	if err != nil {
		return err
	}
	body, err := json.Marshal(map[string]string{"query": overheadQueries[qi].query})
	if err != nil {
		return err
	}
	serve := serveCall(hs[hi], body)
	for range n + 1 {
		if err := serve(); err != nil {
			return errors.Join(err, closeLim())
		}
	}
	if err := closeLim(); err != nil {
		return err
	}
	_, err = fmt.Fprintf(stdout, "served %d\n", n+1)
	return err
}
