package redistest

import (
	"os/exec"
	"regexp"
	"strconv"
	"sync"
)

// debugArgs are the arguments that let a test send DEBUG (DEBUG SLEEP to
// stall the server) from the loopback connections it uses: Redis 7 refuses
// the command unless enable-debug-command allows it, and older servers do
// not know the option (where DEBUG is always allowed).
var debugArgs = sync.OnceValue(func() []string {
	out, err := exec.Command(serverBinary, "--version").Output()
	if err != nil {
		return nil
	}
	m := regexp.MustCompile(`v=(\d+)\.`).FindSubmatch(out)
	if m == nil {
		return nil
	}
	if major, _ := strconv.Atoi(string(m[1])); major < 7 {
		return nil
	}
	return []string{"--enable-debug-command", "local"}
})
