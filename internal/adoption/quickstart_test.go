package adoption

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/costguard/costguard/internal/testenv"
	"github.com/costguard/costguard/middleware"
)

// The README's "Add it to your gqlgen server", step by step, on a project
// made by `gqlgen init`: its go get -tool line, then go mod tidy (without
// -mod=mod, as an adopter runs it), the directive declarations and
// gqlgen.yml lines, go tool gqlgen generate, server.go changed as its Go
// block says (the imports, the lines at the start of main, the two lines
// in place of gqlgen init's), a build, and the server it builds answering
// the README's curl: priced, debited, with the rate-limit headers and
// extensions.cost; then a persisted query by its hash alone, priced as its
// document.
func TestQuickStart(t *testing.T) {
	testenv.Long(t)
	if testing.Short() {
		t.Skip("runs gqlgen init, generate and the server it builds in a temporary project")
	}
	readme := read(t, filepath.Join(repoRoot, "README.md"))
	start := strings.Index(readme, "## Add it to your gqlgen server")
	if start < 0 {
		t.Fatal(`README.md has no "Add it to your gqlgen server" section`)
	}
	section := readme[start:]
	if end := strings.Index(section[3:], "\n## "); end >= 0 {
		section = section[:end+3]
	}
	tool := fenced(t, section, "sh", "go get -tool")
	directives := fenced(t, section, "graphql", "directive @cost")
	ymlLines := fenced(t, section, "yaml", "skip_runtime")
	code := fenced(t, section, "go", "lim.Handler(srv)")
	versions := wantVersions(t, read(t, filepath.Join(repoRoot, "docs", "gqlgen.md")))

	p := &project{t: t, dir: t.TempDir()}
	p.run("go", "mod", "init", "example.com/todo")
	p.use(versions)
	p.run("go", "run", "github.com/99designs/gqlgen", "init")
	// Step 1. costguard comes from this checkout; the go get -tool line
	// is run as written, at the gqlgen the project builds with.
	p.run("go", "mod", "edit", "-require=github.com/costguard/costguard@v0.0.0", "-replace=github.com/costguard/costguard="+repoRoot)
	getTool := strings.Fields(lineWith(t, tool, "go get -tool"))
	if len(getTool) != 4 || !strings.HasPrefix(getTool[3], gqlgenPath+"@") {
		t.Fatalf("the README's go get -tool line is %q", getTool)
	}
	p.strict(getTool[0], append(getTool[1:3], gqlgenPath+"@"+p.version(gqlgenPath))...)

	// Step 2.
	schema := strings.Replace(p.read("graph/schema.graphqls"), "  todos: [Todo!]!", "  todos: [Todo!]! @listSize(assumedSize: 20)", 1)
	p.write("graph/schema.graphqls", schema+"\n"+directives)
	p.write("gqlgen.yml", p.read("gqlgen.yml")+"\n"+ymlLines)
	p.strict("go", "mod", "tidy")
	p.strict("go", "tool", "gqlgen", "generate")

	// Step 3: the Go block's three parts, where it says they go.
	imports, rest, ok := strings.Cut(code, "// At the start of main:\n")
	atStart, inPlace, ok2 := strings.Cut(rest, "// In place of gqlgen init's AutomaticPersistedQuery and /query lines:\n")
	if !ok || !ok2 {
		t.Fatalf("the README's Go block is not imports, the lines at the start of main, the lines in place of gqlgen init's:\n%s", code)
	}
	src := p.read("server.go")
	for _, line := range strings.Split(imports, "\n") {
		if line = strings.TrimSpace(line); strings.HasPrefix(line, `"`) {
			src = strings.Replace(src, "import (\n", "import (\n\t"+line+"\n", 1)
		}
	}
	src = replaceOnce(t, src, "func main() {\n", "func main() {\n"+strings.TrimSpace(atStart)+"\n")
	apq := regexp.MustCompile(`(?s)\tsrv\.Use\(extension\.AutomaticPersistedQuery\{.*?\n\t\}\)\n`).FindString(src)
	if apq == "" {
		t.Fatalf("gqlgen init's server.go has no AutomaticPersistedQuery extension:\n%s", src)
	}
	src = replaceOnce(t, src, apq, "\t"+lineWith(t, inPlace, "AutomaticPersistedQuery")+"\n")
	src = replaceOnce(t, src, "\thttp.Handle(\"/query\", srv)\n", "\t"+lineWith(t, inPlace, "http.Handle")+"\n")
	p.write("server.go", src)
	implementTodos(p)
	p.strict("go", "mod", "tidy")
	p.strict("go", "vet", ".")
	p.strict("go", "build", "-o", "server", ".")
	p.checkVersions(versions)

	// Step 4: the server it built, on a free port.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	srv := exec.CommandContext(ctx, filepath.Join(p.dir, "server"))
	srv.Dir = p.dir
	srv.Env = append(os.Environ(), "PORT="+port)
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); _ = srv.Wait() })
	url := "http://127.0.0.1:" + port + "/query"
	var first quickAnswer
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if first, err = postQuery(url, `{"query":"{ todos { text } }"}`); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server built from the quick start did not answer: %v", err)
		}
	}
	c := first.body.Extensions.Cost
	if first.status != http.StatusOK || len(first.body.Data.Todos) != 2 || c.RequestedQueryCost != 20 ||
		c.ActualQueryCost == nil || *c.ActualQueryCost != 2 {
		t.Errorf("the README's query: %d %+v, want 200, the two todos, 20 requested and 2 actual", first.status, first.body)
	}
	if first.remaining != "498" || first.header.Get("RateLimit") == "" || first.header.Get("RateLimit-Policy") == "" {
		t.Errorf("headers %v, want X-RateLimit-Remaining 498 (20 debited, 18 refunded) and the RateLimit headers", first.header)
	}
	// gqlgen init's persisted-query extension, with the limiter's cache: a
	// registration, then the hash alone, each priced as the document.
	const doc = "{ todos { id } }"
	ext := `"extensions":{"persistedQuery":{"version":1,"sha256Hash":"` + fmt.Sprintf("%x", sha256.Sum256([]byte(doc))) + `"}}`
	for _, body := range []string{`{"query":"` + doc + `",` + ext + `}`, `{` + ext + `}`} {
		a, err := postQuery(url, body)
		if err != nil || a.status != http.StatusOK || len(a.body.Data.Todos) != 2 || a.body.Extensions.Cost.RequestedQueryCost != 20 {
			t.Errorf("persisted query %s: %v %d %+v, want the two todos priced 20", body, err, a.status, a.body)
		}
	}
}

// quickAnswer is the server's answer to one POST.
type quickAnswer struct {
	status    int
	header    http.Header
	remaining string
	body      struct {
		Data struct {
			Todos []struct{ ID, Text string }
		}
		Errors     json.RawMessage
		Extensions struct{ Cost middleware.Cost }
	}
}

func postQuery(url, body string) (quickAnswer, error) {
	var a quickAnswer
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		return a, err
	}
	defer resp.Body.Close()
	a.status, a.header = resp.StatusCode, resp.Header
	a.remaining = resp.Header.Get(middleware.HeaderXRateLimitRemaining)
	return a, json.NewDecoder(resp.Body).Decode(&a.body)
}

// implementTodos makes gqlgen init's todos resolver return two todos.
func implementTodos(p *project) {
	p.t.Helper()
	src := replaceFunc(p.t, p.read("graph/schema.resolvers.go"), "func (r *queryResolver) Todos(", `func (r *queryResolver) Todos(ctx context.Context) ([]*model.Todo, error) {
	return []*model.Todo{{ID: "1", Text: "one"}, {ID: "2", Text: "two"}}, nil
}`)
	p.write("graph/schema.resolvers.go", src)
}

// strict runs a command as an adopter does, without the -mod=mod the
// other steps use: a go.sum entry missing is an error.
func (p *project) strict(name string, args ...string) string {
	p.t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = p.dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		p.t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// lineWith is the line of block holding marker, trimmed.
func lineWith(t *testing.T, block, marker string) string {
	t.Helper()
	for _, line := range strings.Split(block, "\n") {
		if strings.Contains(line, marker) {
			if code, _, ok := strings.Cut(line, " # "); ok {
				line = code // a shell comment
			}
			return strings.TrimSpace(line)
		}
	}
	t.Fatalf("no line with %q in:\n%s", marker, block)
	return ""
}

func replaceOnce(t *testing.T, src, old, with string) string {
	t.Helper()
	if strings.Count(src, old) != 1 {
		t.Fatalf("%q is not once in:\n%s", old, src)
	}
	return strings.Replace(src, old, with, 1)
}
