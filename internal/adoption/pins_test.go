package adoption

import (
	"maps"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/costguard/costguard/internal/testenv"
)

// pinned are the versions of an adopter that must survive adding costguard:
// a scraper on chromedp v0.9.2 (later releases removed chromedp.Tasks and
// NewRemoteAllocator), client_golang v1.19.0, pgx v5.5.0, and gqlgen
// v0.17.73 with the gqlparser it requires.
var pinned = map[string]string{
	"github.com/chromedp/chromedp":        "v0.9.2",
	"github.com/prometheus/client_golang": "v1.19.0",
	"github.com/jackc/pgx/v5":             "v5.5.0",
	gqlgenPath:                            "v0.17.73",
	gqlparserPath:                         "v2.5.26",
}

// adopterGo is the adopter's go directive: the oldest Go costguard
// supports, which adding costguard must leave as it is.
const adopterGo = "1.26.0"

// An adopter module made on the fly, pinned as above, with a program
// (testdata/pins/main.go) that uses each of them and costguard's core: the
// go get of the README (costguard required, here replaced by this checkout),
// go mod tidy and go build must leave every pinned version and the go
// directive as they were. Before costguard split its optional adapters,
// example server and browser test into modules of their own, its go.mod
// raised chromedp to v0.23.1 (and the program stopped compiling), pgx,
// client_golang and gqlgen. What else costguard adds or raises is logged.
func TestAdopterPinsSurvive(t *testing.T) {
	testenv.Long(t)
	if testing.Short() {
		t.Skip("builds an adopter module with chromedp, pgx, client_golang and gqlgen")
	}
	p := &project{t: t, dir: t.TempDir()}
	var req strings.Builder
	for path, v := range pinned {
		req.WriteString("\t" + path + " " + v + "\n")
	}
	p.write("go.mod", "module example.com/adopter\n\ngo "+adopterGo+"\n\nrequire (\n"+req.String()+")\n")
	// The adopter as it was: the same program without costguard's lines.
	main := read(t, filepath.Join("testdata", "pins", "main.go"))
	p.write("main.go", withoutCostguard(t, main))
	p.run("go", "mod", "tidy")
	p.run("go", "build", "-o", "adopter", ".")
	p.checkPins()
	before := p.modules()

	p.write("main.go", main)
	p.run("go", "mod", "edit", "-require=github.com/costguard/costguard@v0.0.0", "-replace=github.com/costguard/costguard="+repoRoot)
	p.run("go", "mod", "tidy")
	p.run("go", "build", "-o", "adopter", ".")
	p.checkPins()
	after := p.modules()
	for _, path := range slices.Sorted(maps.Keys(after)) {
		switch v, was, ok := after[path], before[path], before[path] != ""; {
		case !ok:
			t.Logf("costguard adds %s %s", path, v)
		case was != v:
			t.Logf("costguard raises %s from %s to %s", path, was, v)
		}
	}
}

// checkPins fails unless go.mod says the go directive and the module builds
// with the pinned versions.
func (p *project) checkPins() {
	p.t.Helper()
	goMod := p.read("go.mod")
	if m := regexp.MustCompile(`(?m)^go (\S+)$`).FindStringSubmatch(goMod); m == nil || m[1] != adopterGo {
		p.t.Errorf("go.mod's go directive is %v, want %s", m, adopterGo)
	}
	if strings.Contains(goMod, "\ntoolchain ") {
		p.t.Errorf("go.mod gained a toolchain line:\n%s", goMod)
	}
	got := p.modules()
	for path, v := range pinned {
		if got[path] != v {
			p.t.Errorf("the adopter builds with %s %s, want %s", path, got[path], v)
		}
	}
}

// modules is every module of the build list with its version.
func (p *project) modules() map[string]string {
	p.t.Helper()
	mods := map[string]string{}
	for _, line := range strings.Split(p.run("go", "list", "-m", "-f", "{{.Path}} {{.Version}}", "all"), "\n") {
		if path, v, ok := strings.Cut(strings.TrimSpace(line), " "); ok {
			mods[path] = v
		}
	}
	return mods
}

// withoutCostguard is the program with costguard's imports and the lines
// between the markers "store, err := redisstore.New" and "_ = transport"
// taken out, the handler served plain.
func withoutCostguard(t *testing.T, src string) string {
	t.Helper()
	i, j := strings.Index(src, "\tstore, err := redisstore.New"), strings.Index(src, "\t_ = transport.Websocket")
	if i < 0 || j < 0 {
		t.Fatal("testdata/pins/main.go lost its markers")
	}
	src = src[:i] + "\t_ = transport.Websocket{}\n" + src[strings.Index(src[j:], "\n")+j+1:]
	src = strings.Replace(src, "lim.REST(http.NotFoundHandler())", "http.NotFoundHandler()", 1)
	var out []string
	for _, line := range strings.Split(src, "\n") {
		if !strings.Contains(line, "github.com/costguard/costguard") && !strings.Contains(line, "github.com/redis/go-redis") {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}
