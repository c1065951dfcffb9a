package adoption

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/costguard/costguard/internal/testenv"
	"github.com/costguard/costguard/middleware"
)

// repoRoot is the costguard module the project under test requires.
var repoRoot, _ = filepath.Abs(filepath.Join("..", ".."))

// A project made by `gqlgen init` today, with costguard installed as
// docs/gqlgen.md says: the directive declarations and gqlgen.yml lines from
// that page, @cost and @listSize on fields, gqlgen generate, a build, and
// one request priced and debited through lim.Handler. On the way it checks
// what an adopter who skips a step sees, and that the documented rateLimit
// resolver builds with gqlgen init's Int mapping (int32) and with int.
func TestGqlgenInitProject(t *testing.T) {
	testenv.Long(t)
	if testing.Short() {
		t.Skip("runs gqlgen init, generate and go test in a temporary project")
	}
	guide := read(t, filepath.Join(repoRoot, "docs", "gqlgen.md"))
	directives := fenced(t, guide, "graphql", "directive @cost")
	ymlLines := fenced(t, guide, "yaml", "skip_runtime")
	middlewareDoc := read(t, filepath.Join(repoRoot, "docs", "middleware.md"))
	resolver := fenced(t, middlewareDoc, "go", "func (r *queryResolver) RateLimit")
	rateLimitSDL := fenced(t, middlewareDoc, "graphql", "type RateLimit @cost")
	versions := wantVersions(t, guide)
	// The project's test installs the limiter as "Install" shows, with the
	// transports the "Transports" table adds.
	adopterTest := read(t, filepath.Join("testdata", "costguard_test.go"))
	for _, line := range strings.Split(fenced(t, guide, "go", "srv.AddTransport"), "\n") {
		if line = strings.TrimSpace(line); strings.HasPrefix(line, "srv.AddTransport(") && !strings.Contains(adopterTest, line) {
			t.Errorf("testdata/costguard_test.go lacks the line of docs/gqlgen.md's Install %q", line)
		}
	}

	p := &project{t: t, dir: t.TempDir()}
	p.run("go", "mod", "init", "example.com/todo")
	p.run("go", "mod", "edit", "-require=github.com/costguard/costguard@v0.0.0", "-replace=github.com/costguard/costguard="+repoRoot)
	p.use(versions)
	p.run("go", "run", "github.com/99designs/gqlgen", "init")

	// The schema gains cost directives and GitHub's rateLimit field.
	schema := p.read("graph/schema.graphqls")
	schema = strings.Replace(schema, "  todos: [Todo!]!", `  todos: [Todo!]! @listSize(assumedSize: 20)`, 1)
	schema = strings.Replace(schema, "  text: String!", `  text: String! @cost(weight: "3")`, 1)
	schema += "\n" + strings.Replace(rateLimitSDL, "type Query {", "extend type Query {", 1)
	p.write("graph/schema.graphqls", schema)
	out := p.fail("go", "run", "github.com/99designs/gqlgen", "generate")
	if !strings.Contains(out, "Undefined directive") {
		t.Errorf("generate without the declarations: %s", out)
	}

	// Declared but without skip_runtime: fields fail, and the limiter
	// says what to add.
	p.write("graph/schema.graphqls", schema+"\n"+directives)
	p.run("go", "run", "github.com/99designs/gqlgen", "generate")
	p.implement(resolver)
	p.write("costguard_test.go", adopterTest)
	res := p.result()
	if !hasError(res, "directive cost is not implemented") && !hasError(res, "directive listSize is not implemented") {
		t.Errorf("without skip_runtime: %+v", res)
	}
	if !strings.Contains(res.Log, "skip_runtime: true") {
		t.Errorf("the limiter did not name the fix: %q", res.Log)
	}

	// The documented gqlgen.yml lines: priced, debited, no errors.
	p.write("gqlgen.yml", p.read("gqlgen.yml")+"\n"+ymlLines)
	p.run("go", "run", "github.com/99designs/gqlgen", "generate")
	p.implement(resolver)
	res = p.result()
	if len(res.Errors) != 0 {
		t.Fatalf("with the gqlgen.yml lines: %+v", res)
	}
	// Priced at 20 todos × (1 + text's weight 3), rateLimit free; the two
	// todos returned cost 8, and the rest comes back.
	c := res.Extensions.Cost
	if c.RequestedQueryCost != 80 || c.ActualQueryCost == nil || *c.ActualQueryCost != 8 ||
		c.ThrottleStatus.CurrentlyAvailable == nil || *c.ThrottleStatus.CurrentlyAvailable != 500-8 {
		t.Errorf("extensions.cost %+v, want 80 requested, 8 actual, 492 left", c)
	}
	if rl := res.Data.RateLimit; rl.Cost != 80 || rl.Remaining != 420 {
		t.Errorf("rateLimit %+v, want cost 80 and 420 remaining (before the refund)", rl)
	}
	checkTransports(t, res.Transports)
	if !strings.Contains(p.read("graph/model/models_gen.go"), "int32") {
		t.Error("gqlgen init no longer maps Int to int32: the int32 build below proves nothing")
	}

	// The rateLimit resolver builds with Int mapped to int too.
	p.write("gqlgen.yml", strings.Replace(p.read("gqlgen.yml"), "      - github.com/99designs/gqlgen/graphql.Int32\n  Int64:", "      - github.com/99designs/gqlgen/graphql.Int\n  Int64:", 1))
	p.run("go", "run", "github.com/99designs/gqlgen", "generate")
	p.implement(resolver)
	if strings.Contains(p.read("graph/model/models_gen.go"), "Limit     int32") {
		t.Fatal("the Int mapping did not change")
	}
	if res = p.result(); len(res.Errors) != 0 || res.Extensions.Cost.RequestedQueryCost != 80 {
		t.Errorf("with Int as int: %+v", res)
	}
	checkTransports(t, res.Transports)
	p.checkVersions(versions) // gqlgen generate and go mod tidy moved nothing
}

// result is what the project's test printed.
type result struct {
	Data struct {
		RateLimit struct{ Cost, Remaining int64 } `json:"rateLimit"`
	} `json:"data"`
	Errors     json.RawMessage `json:"errors"`
	Extensions struct {
		Cost middleware.Cost `json:"cost"`
	} `json:"extensions"`
	Log        string     `json:"log"`
	Transports []exchange `json:"transports"`
}

// exchange is { todos { text } } sent over one transport to a real server,
// with GraphQL-Cost: validate's price and bucket before and after.
type exchange struct {
	Transport, Err, Header string
	Price, Before, After   int64
	Response               json.RawMessage
}

// transportNames are the ways the project's test sends the query, in its
// order: every transport gqlgen ships, WebSocket by both subprotocols.
var transportNames = []string{"POST", "GET", "multipart form", "form-encoded", "application/graphql",
	"multipart/mixed", "SSE", "graphql-transport-ws", "graphql-ws"}

// checkTransports checks that every transport ran the query and paid its
// actual cost: priced at 80 (20 assumed todos × (1 + 3)), the two todos
// returned cost 8, and the other 72 points are refunded before the response
// is written, so extensions.cost and X-RateLimit-Remaining include the
// refund. The bucket refills a point every 7.2 s; the project's test takes
// a fraction of that, so whole points compare exactly.
func checkTransports(t *testing.T, got []exchange) {
	t.Helper()
	var names []string
	for _, x := range got {
		names = append(names, x.Transport)
	}
	if strings.Join(names, ",") != strings.Join(transportNames, ",") {
		t.Errorf("the project's test sent the query by %q, want %q", names, transportNames)
	}
	for _, x := range got {
		var r struct {
			Data struct {
				Todos []struct{ Text string }
			}
			Errors     json.RawMessage
			Extensions struct{ Cost middleware.Cost }
		}
		if x.Err != "" {
			t.Errorf("%s: %s", x.Transport, x.Err)
			continue
		}
		if err := json.Unmarshal(x.Response, &r); err != nil {
			t.Errorf("%s: %v: %s", x.Transport, err, x.Response)
			continue
		}
		c := r.Extensions.Cost
		if len(r.Errors) != 0 && string(r.Errors) != "null" || len(r.Data.Todos) != 2 || r.Data.Todos[0].Text != "one" || r.Data.Todos[1].Text != "two" {
			t.Errorf("%s: data %+v, errors %s, want the two todos", x.Transport, r.Data, r.Errors)
		}
		if x.Price != 80 || c.RequestedQueryCost != x.Price || c.ActualQueryCost == nil || *c.ActualQueryCost != 8 {
			t.Errorf("%s: extensions.cost %+v, want 80 requested (GraphQL-Cost: validate says %d), 8 actual", x.Transport, c, x.Price)
		}
		if paid := x.Before - x.After; paid != 8 {
			t.Errorf("%s: the bucket went from %d to %d, want 8 (its actual cost) paid", x.Transport, x.Before, x.After)
		}
		if a := c.ThrottleStatus.CurrentlyAvailable; a == nil || *a != x.After {
			t.Errorf("%s: currentlyAvailable %v, want %d", x.Transport, a, x.After)
		}
		// Over HTTP the headers say the same, but an SSE stream's go out
		// as it starts, once the operation is debited and before it runs,
		// so before the refund.
		switch want := x.After; x.Transport {
		case "graphql-transport-ws", "graphql-ws": // a WebSocket's upgrade comes before any operation
		case "SSE":
			want = x.Before - x.Price
			fallthrough
		default:
			if x.Header != strconv.FormatInt(want, 10) {
				t.Errorf("%s: X-RateLimit-Remaining %q, want %d", x.Transport, x.Header, want)
			}
		}
	}
}

func hasError(r result, message string) bool { return bytes.Contains(r.Errors, []byte(message)) }

type project struct {
	t   *testing.T
	dir string
}

func (p *project) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.Dir = p.dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	return cmd
}

func (p *project) run(name string, args ...string) string {
	p.t.Helper()
	out, err := p.command(name, args...).CombinedOutput()
	if err != nil {
		p.t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// fail runs a command that must fail, and returns its output.
func (p *project) fail(name string, args ...string) string {
	p.t.Helper()
	out, err := p.command(name, args...).CombinedOutput()
	if err == nil {
		p.t.Fatalf("%s %s succeeded:\n%s", name, strings.Join(args, " "), out)
	}
	return string(out)
}

func (p *project) read(name string) string { return read(p.t, filepath.Join(p.dir, name)) }

func (p *project) write(name, content string) {
	p.t.Helper()
	if err := os.WriteFile(filepath.Join(p.dir, name), []byte(content), 0o644); err != nil {
		p.t.Fatal(err)
	}
}

// implement replaces the resolver stubs gqlgen generated: todos returns
// two items, rateLimit is the documented resolver.
func (p *project) implement(rateLimit string) {
	p.t.Helper()
	src := p.read("graph/schema.resolvers.go")
	src = replaceFunc(p.t, src, "func (r *queryResolver) RateLimit(", rateLimit)
	src = replaceFunc(p.t, src, "func (r *queryResolver) Todos(", `func (r *queryResolver) Todos(ctx context.Context) ([]*model.Todo, error) {
	return []*model.Todo{{ID: "1", Text: "one"}, {ID: "2", Text: "two"}}, nil
}`)
	for _, imp := range []string{"errors", "time", "github.com/costguard/costguard/middleware"} {
		if !strings.Contains(src, `"`+imp+`"`) { // gqlgen generate keeps what an earlier run added
			src = strings.Replace(src, "import (\n", "import (\n\t\""+imp+"\"\n", 1)
		}
	}
	p.write("graph/schema.resolvers.go", src)
}

// result runs the project's test and decodes what it printed.
func (p *project) result() result {
	p.t.Helper()
	out := p.run("go", "test", "-count=1", "-v", "-run", "TestCostguard", ".")
	m := regexp.MustCompile(`(?m)^RESULT (.*)$`).FindStringSubmatch(out)
	if m == nil {
		p.t.Fatalf("the project's test printed no result:\n%s", out)
	}
	var r result
	if err := json.Unmarshal([]byte(m[1]), &r); err != nil {
		p.t.Fatalf("%v: %s\n%s", err, m[1], out)
	}
	if string(r.Errors) == "null" {
		r.Errors = nil
	}
	return r
}

// replaceFunc replaces the function starting with head (up to its closing
// brace at the start of a line) by with.
func replaceFunc(t *testing.T, src, head, with string) string {
	t.Helper()
	i := strings.Index(src, head)
	if i < 0 {
		t.Fatalf("no %q in the generated resolvers", head)
	}
	j := strings.Index(src[i:], "\n}\n")
	if j < 0 {
		t.Fatalf("no end to %q", head)
	}
	return src[:i] + with + src[i+j+2:]
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// fenced returns the first ```lang block of doc that contains marker.
func fenced(t *testing.T, doc, lang, marker string) string {
	t.Helper()
	for _, m := range regexp.MustCompile("(?s)```"+lang+"\n(.*?)```").FindAllStringSubmatch(doc, -1) {
		if strings.Contains(m[1], marker) {
			return m[1]
		}
	}
	t.Fatalf("no %s block with %q", lang, marker)
	return ""
}

// requiredVersion is the version of module path costguard's go.mod requires.
func requiredVersion(t *testing.T, path string) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^\s*` + regexp.QuoteMeta(path) + ` (v\S+)`).FindStringSubmatch(read(t, filepath.Join(repoRoot, "go.mod")))
	if m == nil {
		t.Fatalf("go.mod does not require %s", path)
	}
	return m[1]
}

const (
	gqlgenPath    = "github.com/99designs/gqlgen"
	gqlparserPath = "github.com/vektah/gqlparser/v2"
)

// versionEnv chooses the gqlgen the project is made with: unset or
// "minimum", the versions costguard's go.mod requires, which are the oldest
// gqlgen and gqlparser the library works with (docs/gqlgen.md's "Versions"
// says both); "latest", the newest releases of both; a version (v0.17.95),
// that gqlgen.
const versionEnv = "COSTGUARD_GQLGEN_VERSION"

// wantVersions is the version the project must build with, by module path:
// what versionEnv asks for. A version "" is whatever go get selects;
// "latest" is resolved by use.
func wantVersions(t *testing.T, guide string) map[string]string {
	t.Helper()
	// The table in docs/gqlgen.md's "Versions": a module, the oldest
	// version that works, the version go.mod requires.
	table := map[string][2]string{}
	for _, m := range regexp.MustCompile(`(?m)^\| (gqlgen|gqlparser) \| (v\S+) \| (v\S+) \|$`).FindAllStringSubmatch(guide, -1) {
		table[map[string]string{"gqlgen": gqlgenPath, "gqlparser": gqlparserPath}[m[1]]] = [2]string{m[2], m[3]}
	}
	// go.mod requires the oldest versions that work: the minimum is what
	// it requires.
	for _, path := range []string{gqlgenPath, gqlparserPath} {
		if got, want := table[path][1], requiredVersion(t, path); got != want {
			t.Errorf("docs/gqlgen.md says go.mod requires %s %q; it requires %s", path, got, want)
		}
		if got, want := table[path][0], requiredVersion(t, path); got != want {
			t.Errorf("docs/gqlgen.md says the oldest %s that works is %q; go.mod requires %s", path, got, want)
		}
	}
	switch v := os.Getenv(versionEnv); v {
	case "", "minimum":
		return map[string]string{gqlgenPath: requiredVersion(t, gqlgenPath), gqlparserPath: requiredVersion(t, gqlparserPath)}
	case "latest":
		return map[string]string{gqlgenPath: "latest", gqlparserPath: "latest"}
	default:
		if !regexp.MustCompile(`^v\d+\.\d+\.\d+$`).MatchString(v) {
			t.Fatalf("%s=%q: want minimum, latest or a version", versionEnv, v)
		}
		return map[string]string{gqlgenPath: v, gqlparserPath: ""}
	}
}

// use makes the project require the versions, "latest" resolved to the
// newest release. costguard's go.mod requires the oldest versions that
// work, so adding it must never raise the project's gqlgen or gqlparser:
// for the minimum and the latest, a raised version fails the test. A
// version asked for by number that is older still is raised by Go's
// version selection, and pinned with a replace directive to try it anyway.
func (p *project) use(versions map[string]string) {
	p.t.Helper()
	for _, path := range []string{gqlgenPath, gqlparserPath} {
		v := versions[path]
		if v == "" {
			continue
		}
		if v == "latest" {
			v = strings.TrimSpace(p.run("go", "list", "-m", "-f", "{{.Version}}", path+"@latest"))
			versions[path] = v
		}
		p.run("go", "mod", "edit", "-require="+path+"@"+v)
		if got := p.version(path); got != v {
			if env := os.Getenv(versionEnv); env == "minimum" || env == "latest" {
				p.t.Errorf("%s %s selected: costguard's go.mod raised it from %s", path, got, v)
			}
			p.t.Logf("%s %s selected (costguard's go.mod requires it): pinned to %s", path, got, v)
			p.run("go", "mod", "edit", "-replace="+path+"="+path+"@"+v)
		}
	}
	p.checkVersions(versions)
}

// checkVersions fails unless the project builds with the versions.
func (p *project) checkVersions(versions map[string]string) {
	p.t.Helper()
	for _, path := range []string{gqlgenPath, gqlparserPath} {
		got := p.version(path)
		if v := versions[path]; v != "" && got != v {
			p.t.Fatalf("the project builds with %s %s, want %s", path, got, v)
		}
		p.t.Logf("%s %s", path, got)
	}
}

// version is the version of module path the project builds with, after
// any replace directive: from the whole module graph, which a go.mod just
// edited may contradict.
func (p *project) version(path string) string {
	p.t.Helper()
	out := p.run("go", "list", "-m", "-f", "{{.Path}} {{with .Replace}}{{.Version}}{{else}}{{.Version}}{{end}}", "all")
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(line, path+" "); ok {
			return v
		}
	}
	p.t.Fatalf("the project does not depend on %s:\n%s", path, out)
	return ""
}
