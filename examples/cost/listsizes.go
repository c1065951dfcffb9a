package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/costguard/costguard/complexity"
)

// The list-sizes subcommand reads what a server recorded of the lists it
// priced at an assumed size (GET /admin/list-sizes, from the admin API or
// from files holding its answer, one per process: they are merged) and
// prints the sizes to assume:
//
//	go run ./examples/cost list-sizes [-admin URL [-token-file FILE]] \
//	    [-min-responses N] [-json] [FILE|- ...]
//
// The text output is a table of the fields (assumed size, responses,
// overruns, largest list, suggested size), then the suggestions as
// @listSize lines to paste into the schema; -json prints only the map of
// field coordinate to suggested size, what complexity.WithAssumedSizes and
// the example server's list_sizes key take. Fields with fewer than
// -min-responses responses are left out of the suggestions.
//
// Exit status: 0; 1 when a source cannot be read or is not the admin
// API's answer; 2 for wrong usage.

const listSizesUsage = "usage: cost list-sizes [-admin URL [-token-file FILE]] [-min-responses N] [-json] [FILE|- ...]\n"

// maxAdminAnswer bounds what is read of one source.
const maxAdminAnswer = 64 << 20

// adminTimeout bounds the request to the admin API.
const adminTimeout = 30 * time.Second

type listSizesFlags struct {
	admin        string
	tokenFile    string
	minResponses int64
	json         bool
	files        []string
}

func parseListSizesFlags(args []string, stderr io.Writer) (*listSizesFlags, error) {
	f := &listSizesFlags{}
	fs := flag.NewFlagSet("cost list-sizes", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&f.admin, "admin", "", "the admin API's base `URL` (http://127.0.0.1:8081): read its /admin/list-sizes")
	fs.StringVar(&f.tokenFile, "token-file", "", "`FILE` holding the admin API's bearer token")
	fs.Int64Var(&f.minResponses, "min-responses", 1, "suggest a size only for fields seen in at least `N` responses")
	fs.BoolVar(&f.json, "json", false, "print the suggestions as one JSON object of field coordinate to size")
	usage, err := parseOrUsage(fs, args, stderr, "cost list-sizes", listSizesUsage)
	if err != nil {
		return nil, err
	}
	f.files = fs.Args()
	var problem string
	switch {
	case f.admin == "" && len(f.files) == 0:
		problem = "give -admin URL or the files holding /admin/list-sizes answers"
	case f.tokenFile != "" && f.admin == "":
		problem = "-token-file needs -admin"
	case f.minResponses < 1:
		problem = "-min-responses must be at least 1"
	}
	if problem != "" {
		fmt.Fprintf(stderr, "cost list-sizes: %s\n", problem)
		usage()
		return nil, errors.New(problem)
	}
	return f, nil
}

func runListSizes(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	f, err := parseListSizesFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		return exitUsage
	}
	merged := map[string]*complexity.ListSizeStats{}
	add := func(name string, r io.Reader) error {
		var answer struct {
			Fields []complexity.ListSizeStats `json:"fields"`
		}
		dec := json.NewDecoder(io.LimitReader(r, maxAdminAnswer))
		if err := dec.Decode(&answer); err != nil {
			return fmt.Errorf("%s: not an /admin/list-sizes answer: %w", name, err)
		}
		for _, s := range answer.Fields {
			if s.Field == "" || s.Responses < 0 || len(s.Buckets) > complexity.ListSizeBuckets {
				return fmt.Errorf("%s: not an /admin/list-sizes answer: a field without a name, or with negative counts or too many buckets", name)
			}
			if m := merged[s.Field]; m != nil {
				m.Merge(s)
			} else {
				merged[s.Field] = &s
			}
		}
		return nil
	}
	if f.admin != "" {
		if err := fetchListSizes(f, add); err != nil {
			fmt.Fprintf(stderr, "cost list-sizes: %v\n", err)
			return exitRejected
		}
	}
	for _, path := range f.files {
		if err := readListSizes(path, stdin, add); err != nil {
			fmt.Fprintf(stderr, "cost list-sizes: %v\n", err)
			return exitRejected
		}
	}
	stats := make([]complexity.ListSizeStats, 0, len(merged))
	for _, s := range merged {
		if s.Responses >= f.minResponses {
			stats = append(stats, *s)
		}
	}
	slices.SortFunc(stats, func(a, b complexity.ListSizeStats) int { return strings.Compare(a.Field, b.Field) })
	printListSizes(stdout, stats, f.json)
	return exitOK
}

func readListSizes(path string, stdin io.Reader, add func(string, io.Reader) error) error {
	if path == "-" {
		return add("stdin", stdin)
	}
	file, err := os.Open(path)
	if err != nil {
		return err
	}
	defer file.Close()
	return add(path, file)
}

// fetchListSizes reads GET /admin/list-sizes from f.admin.
func fetchListSizes(f *listSizesFlags, add func(string, io.Reader) error) error {
	url := strings.TrimSuffix(f.admin, "/")
	if !strings.HasSuffix(url, "/admin/list-sizes") {
		url += "/admin/list-sizes"
	}
	ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("-admin: %w", err)
	}
	if f.tokenFile != "" {
		token, err := os.ReadFile(f.tokenFile)
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%s: %s %s", url, resp.Status, strings.TrimSpace(string(msg)))
	}
	return add(url, resp.Body)
}

// printListSizes writes the suggestions: with asJSON the map alone, else
// the table and the @listSize lines.
func printListSizes(w io.Writer, stats []complexity.ListSizeStats, asJSON bool) {
	sizes := complexity.SuggestedSizes(stats)
	if asJSON {
		b, _ := json.MarshalIndent(sizes, "", "  ")
		fmt.Fprintf(w, "%s\n", b)
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "field\tassumed\tresponses\toverruns\tmax\tsuggested")
	for _, s := range stats {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\n", s.Field, s.Assumed, s.Responses, s.Overruns, s.Max, s.Suggested())
	}
	tw.Flush()
	fmt.Fprintf(w, "\n%s", complexity.FormatListSizes(sizes))
}

// maxListSizesFile bounds what -list-sizes reads.
const maxListSizesFile = 16 << 20

// listSizesFile is -list-sizes: the sizes its JSON file maps each list
// field coordinate to, read when the flag is parsed.
type listSizesFile struct {
	path  string
	sizes map[string]int
}

func (l *listSizesFile) String() string { return l.path }

func (l *listSizesFile) Set(path string) error {
	file, err := os.Open(path)
	if err != nil {
		return err
	}
	defer file.Close()
	var sizes map[string]int
	if err := json.NewDecoder(io.LimitReader(file, maxListSizesFile)).Decode(&sizes); err != nil {
		return fmt.Errorf("%s: not a JSON object of field coordinate to size: %w", path, err)
	}
	l.path, l.sizes = path, sizes
	return nil
}
