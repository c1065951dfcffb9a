package serve

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/costguard/costguard/internal/testenv"
	"github.com/costguard/costguard/limiter/limitertest"
)

// The user documentation, relative to this package: the README and every
// page of docs/.
func docFiles(t *testing.T) []string {
	t.Helper()
	pages, err := filepath.Glob(filepath.Join("..", "..", "docs", "*.md"))
	require.NoError(t, err)
	require.NotEmpty(t, pages)
	return append([]string{filepath.Join("..", "..", "README.md")}, pages...)
}

// fencedBlocks returns the bodies of the fenced code blocks of doc whose
// info string is lang.
func fencedBlocks(doc []byte, lang string) []string {
	var blocks []string
	for _, m := range regexp.MustCompile("(?ms)^```"+regexp.QuoteMeta(lang)+"\n(.*?)^```").FindAllSubmatch(doc, -1) {
		blocks = append(blocks, string(m[1]))
	}
	return blocks
}

// TestDocsYAMLStarts: every YAML block of the README and of docs/ is a
// configuration of the example server that starts, as written. The
// exceptions are gqlgen's own gqlgen.yml: docs/gqlgen.md's YAML, and the
// README's quick start block of directives (internal/adoption runs it), and
// CI workflow steps (a block whose first line names .github/workflows/).
func TestDocsYAMLStarts(t *testing.T) {
	n := 0
	for _, path := range docFiles(t) {
		if filepath.Base(path) == "gqlgen.md" {
			continue
		}
		doc, err := os.ReadFile(path)
		require.NoError(t, err)
		for _, b := range fencedBlocks(doc, "yaml") {
			if strings.HasPrefix(b, "directives:\n") {
				continue // gqlgen.yml's, not the server's
			}
			if strings.HasPrefix(b, "# .github/workflows/") {
				continue // a CI step, not the server's
			}
			n++
			cfg, err := parseConfig([]byte(b))
			require.NoError(t, err, "%s:\n%s", path, b)
			_, cleanup, err := newServer(cfg, deps{logger: discardLogger()})
			require.NoError(t, err, "%s:\n%s", path, b)
			require.NoError(t, cleanup())
		}
	}
	assert.GreaterOrEqual(t, n, 4, "fewer YAML blocks than expected: did the pattern stop matching?")
}

// docsClock is the instant the documented transcripts were taken at
// (Tue, 01 Dec 2026 10:59:37 GMT): on it, their reset times and resetAt
// are what a test gets.
var docsClock = time.Unix(1_796_122_777, 0)

// TestDocsConsoleTranscripts runs every console block of the README and of
// docs/ as shown, with bash and curl, against the example server on a fake
// clock, and compares what each command prints with what the block shows.
//
// A block is a series of "$ command" lines (a line ending in a backslash
// goes on) each followed by its output. "go run ./examples/server [-config
// FILE] &" starts the server in-process, with that file read from the
// block's directory, for that block alone. The blocks of a page that start
// none are run as a reader following the page in one terminal runs them:
// top to bottom, in one shell (a variable set above is set below), against
// one server of the defaults (a block sees the budgets the blocks above it
// spent). Every
// localhost:8080 is sent to the test's server. What may differ from one run
// to the next is masked on both sides: the Date header, a challenge token
// (random), and a shed request's Retry-After (drawn from 1 to 3 s).
func TestDocsConsoleTranscripts(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err == nil {
		_, err = exec.LookPath("curl")
	}
	if err != nil {
		testenv.Missing(t, fmt.Sprintf("the documented transcripts need bash and curl: %v", err))
	}
	n := 0
	for _, path := range docFiles(t) {
		doc, err := os.ReadFile(path)
		require.NoError(t, err)
		var tour []step     // the blocks that start no server, in the page's order
		var blocks []string // their numbers
		for i, b := range fencedBlocks(doc, "console") {
			n++
			steps := parseTranscript(t, b)
			if !slices.ContainsFunc(steps, func(s step) bool { return startCommand.MatchString(s.cmd) }) {
				tour = append(tour, steps...)
				blocks = append(blocks, strconv.Itoa(i+1))
				continue
			}
			t.Run(fmt.Sprintf("%s#%d", filepath.Base(path), i+1), func(t *testing.T) {
				t.Parallel()
				runTranscript(t, bash, steps)
			})
		}
		if len(tour) > 0 {
			t.Run(fmt.Sprintf("%s#%s", filepath.Base(path), strings.Join(blocks, "+")), func(t *testing.T) {
				t.Parallel()
				runTranscript(t, bash, tour)
			})
		}
	}
	require.GreaterOrEqual(t, n, 3, "fewer console blocks than expected: did the pattern stop matching?")
}

// step is one command of a transcript and the output it shows.
type step struct {
	cmd, want string
}

func parseTranscript(t *testing.T, block string) []step {
	t.Helper()
	var steps []step
	lines := strings.Split(strings.TrimSuffix(block, "\n"), "\n")
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		if !strings.HasPrefix(line, "$ ") {
			require.NotEmpty(t, steps, "output before the first command: %q", line)
			steps[len(steps)-1].want += line + "\n"
			continue
		}
		cmd := strings.TrimPrefix(line, "$ ")
		for strings.HasSuffix(cmd, "\\") && i+1 < len(lines) {
			i++
			cmd += "\n" + lines[i] // bash reads the backslash-newline as the shell does
		}
		steps = append(steps, step{cmd: cmd})
	}
	require.NotEmpty(t, steps)
	return steps
}

var startCommand = regexp.MustCompile(`^go run \./examples/server(?: -config (\S+))? &$`)

func runTranscript(t *testing.T, bash string, steps []step) {
	dir := t.TempDir()
	var before, after []step // the commands before and after the server starts
	configFile := ""
	started := false
	for _, s := range steps {
		if m := startCommand.FindStringSubmatch(s.cmd); m != nil {
			require.False(t, started, "a transcript starts one server")
			require.Empty(t, s.want, "the server's start prints nothing the transcript shows")
			started, configFile = true, m[1]
			continue
		}
		if started {
			after = append(after, s)
		} else {
			before = append(before, s)
		}
	}
	if !started { // the server of the README's two commands
		before, after = nil, steps
	}
	runSteps(t, bash, dir, "", before)

	cfg := defaultConfig()
	if configFile != "" {
		var err error
		cfg, err = loadConfig(filepath.Join(dir, configFile))
		require.NoError(t, err)
	}
	h, cleanup, err := newServer(cfg, deps{clock: limitertest.NewFakeClock(docsClock), logger: discardLogger()})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(func() {
		srv.Close() // waits for requests in flight, the transcript's background ones included
		require.NoError(t, cleanup())
	})
	runSteps(t, bash, dir, strings.TrimPrefix(srv.URL, "http://"), after)
}

// runSteps runs steps in one bash, in dir, localhost:8080 sent to addr,
// and compares each command's output with the transcript's.
func runSteps(t *testing.T, bash, dir, addr string, steps []step) {
	t.Helper()
	if len(steps) == 0 {
		return
	}
	const mark = "\x1estep\x1e"
	var script strings.Builder
	script.WriteString("set -u\n")
	for _, s := range steps {
		cmd := s.cmd
		if addr != "" {
			cmd = strings.ReplaceAll(cmd, "localhost:8080", addr)
		}
		fmt.Fprintf(&script, "printf '\\n%s\\n'\n%s\n", mark, cmd)
	}
	c := exec.Command(bash, "-c", script.String())
	c.Dir = dir
	var stderr bytes.Buffer
	c.Stderr = &stderr
	c.WaitDelay = 30 * time.Second
	out, err := c.Output()
	require.NoError(t, err, "stderr: %s", stderr.String())
	got := strings.Split(string(out), "\n"+mark+"\n")
	require.Len(t, got, len(steps)+1, "output: %q", out)
	for i, s := range steps {
		assert.Equal(t, maskVolatile(s.want), maskVolatile(got[i+1]), "the output of $ %s", s.cmd)
	}
}

// volatile are the parts of an answer that differ between two runs of the
// same transcript on the same clock.
var volatile = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`(?m)^Date: .*$`), "Date: (the time of the request)"},
	{regexp.MustCompile(`token="[A-Za-z0-9_-]+"`), `token="(random)"`},
	// A shed request's wait is drawn from 1 to 3 seconds.
	{regexp.MustCompile(`(?m)^Retry-After: [1-3]$`), "Retry-After: (1 to 3)"},
	{regexp.MustCompile(`retry in (?:1 second|[23] seconds)","extensions":\{"code":"OVERLOADED","retryAfterSeconds":[1-3]\}`),
		`retry in (1 to 3) seconds","extensions":{"code":"OVERLOADED","retryAfterSeconds":(1 to 3)}`},
}

// shedLength is the length of a shed answer, which "1 second" makes one
// byte shorter than "2 seconds".
var shedLength = regexp.MustCompile(`(?m)^Content-Length: 12[89]$`)

// maskVolatile masks what may differ and what a terminal does not show:
// the carriage returns of HTTP headers and trailing blanks.
func maskVolatile(s string) string {
	s = strings.ReplaceAll(s, "\r", "")
	for _, v := range volatile {
		s = v.re.ReplaceAllString(s, v.with)
	}
	if strings.Contains(s, `"code":"OVERLOADED"`) {
		s = shedLength.ReplaceAllString(s, "Content-Length: (128 or 129)")
	}
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " \t")
	}
	return strings.Trim(strings.Join(lines, "\n"), "\n")
}

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
