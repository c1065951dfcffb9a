package main

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

// The README's "Add it to your gqlgen server" shows this program, whole:
// what a newcomer copies is what the tests build.
func TestReadmeShowsThisProgram(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)\n### Add it to your gqlgen server\n.*?```go\n(.*?)```").FindSubmatch(readme)
	if m == nil {
		t.Fatal(`README.md has no "Add it to your gqlgen server" section with a Go block`)
	}
	src, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	if string(m[1]) != string(src) {
		t.Errorf("README.md's program differs from examples/minimal/main.go:\n%s", m[1])
	}
}
