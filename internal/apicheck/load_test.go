package apicheck

import (
	"bytes"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

// patterns are the library's packages, relative to the module root. Those
// with /internal/ in their path and commands are left out by load.
var patterns = []string{"./budget/...", "./challenge/...", "./client/...", "./complexity/...", "./identity/...", "./limiter/...", "./listsizes/...", "./middleware/...", "./opcosts/...", "./overload/...", "./override/...", "./spenders/...", "./timeline/..."}

// listEnv pins the build context the listing is made for, so that it is the
// same on every machine: the library has no platform-specific API, and
// without cgo every dependency has a pure-Go variant to type-check.
var listEnv = []string{"CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64"}

// A goPackage is one entry of `go list -deps -json`, with the result of
// type-checking it.
type goPackage struct {
	ImportPath string
	Name       string
	Dir        string
	GoFiles    []string
	ImportMap  map[string]string
	DepOnly    bool

	done  chan struct{} // closed when types and err are set
	types *types.Package
	err   error
}

// load type-checks the library's packages and everything they import from
// source, with function bodies ignored: no compiler runs and the build cache
// plays no part, so the cost is the same on a cold machine and under -race
// (about two seconds on two cores). It returns the library's packages sorted
// by import path.
func load(root string) ([]*types.Package, error) {
	cmd := exec.Command("go", append([]string{"list", "-deps",
		"-json=ImportPath,Name,Dir,GoFiles,ImportMap,DepOnly"}, patterns...)...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), listEnv...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %v\n%s", err, stderr.Bytes())
	}
	all := make(map[string]*goPackage)
	var order []*goPackage
	for dec := json.NewDecoder(bytes.NewReader(out)); dec.More(); {
		p := &goPackage{done: make(chan struct{})}
		if err := dec.Decode(p); err != nil {
			return nil, fmt.Errorf("go list output: %v", err)
		}
		all[p.ImportPath] = p
		order = append(order, p)
	}

	// Every package is checked in its own goroutine, which waits for its
	// imports' goroutines; go list has already rejected import cycles.
	fset := token.NewFileSet()
	var wg sync.WaitGroup
	for _, p := range order {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer close(p.done)
			p.types, p.err = check(fset, p, all)
		}()
	}
	wg.Wait()

	var lib []*types.Package
	for _, p := range order {
		if p.err != nil {
			return nil, p.err
		}
		if !p.DepOnly && p.Name != "main" && !isInternal(p.ImportPath) {
			lib = append(lib, p.types)
		}
	}
	if len(lib) == 0 {
		return nil, fmt.Errorf("go list %s: no library packages", strings.Join(patterns, " "))
	}
	return lib, nil
}

func isInternal(path string) bool {
	return strings.HasSuffix(path, "/internal") || strings.Contains(path, "/internal/")
}

func check(fset *token.FileSet, p *goPackage, all map[string]*goPackage) (*types.Package, error) {
	files := make([]*ast.File, 0, len(p.GoFiles))
	for _, name := range p.GoFiles {
		f, err := parser.ParseFile(fset, filepath.Join(p.Dir, name), nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	conf := types.Config{
		IgnoreFuncBodies: true,
		Importer: importerFunc(func(path string) (*types.Package, error) {
			if path == "unsafe" {
				return types.Unsafe, nil
			}
			if mapped, ok := p.ImportMap[path]; ok {
				path = mapped
			}
			dep, ok := all[path]
			if !ok {
				return nil, fmt.Errorf("%s imports %s, which go list did not report", p.ImportPath, path)
			}
			<-dep.done
			if dep.err != nil {
				return nil, fmt.Errorf("%s: import %s: dependency failed to type-check", p.ImportPath, path)
			}
			return dep.types, nil
		}),
	}
	pkg, err := conf.Check(p.ImportPath, fset, files, nil)
	if err != nil {
		return nil, fmt.Errorf("type-checking %s: %v", p.ImportPath, err)
	}
	return pkg, nil
}

type importerFunc func(path string) (*types.Package, error)

func (f importerFunc) Import(path string) (*types.Package, error) { return f(path) }
