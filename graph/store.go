package graph

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/costguard/costguard/graph/model"
)

var (
	// ErrInvalidArgument: an argument is out of range (a negative first or
	// last, an empty or oversized title).
	ErrInvalidArgument = errors.New("graph: invalid argument")
	// ErrNotFound: a mutation names something that does not exist.
	ErrNotFound = errors.New("graph: not found")
	// ErrRepositoryFull: the repository already holds MaxIssuesPerRepository
	// issues. The cap keeps the demo's memory bounded whatever clients send.
	ErrRepositoryFull = errors.New("graph: repository is full")
)

const (
	// MaxIssuesPerRepository caps createIssue, so memory stays bounded.
	MaxIssuesPerRepository = 1000
	// maxRecommendations is the most repositories User.recommendations
	// returns: its @listSize(assumedSize: 5).
	maxRecommendations = 5
	// MaxTitleLength is the longest issue title createIssue accepts, in
	// characters.
	MaxTitleLength = 256
	// MaxNodeIDs is the most ids Query.nodes accepts: the middleware's
	// default breadth cap (Policy.GraphQL.MaxBreadth of middleware.Defaults,
	// pinned by a test), which prices nodes by the length of ids, so an
	// operation the default limiter admits is never refused here.
	MaxNodeIDs = 100
	// defaultRecentIssues is User.recentIssues' limit when it is absent or
	// null: its schema default.
	defaultRecentIssues = 5
)

// FeatureRecommendations names User.recommendations in the degradation list
// (overload): while it is switched off, the field answers an
// empty list.
const FeatureRecommendations = "recommendations"

// Global IDs are a type prefix and the object's natural key.
const (
	userIDPrefix  = "U_"
	repoIDPrefix  = "R_"
	issueIDPrefix = "I_"
)

type userRecord struct {
	user      model.User
	repos     []string // repository names, oldest first
	followers []string // logins
}

type repoRecord struct {
	repo   model.Repository
	issues []model.Issue // oldest first
}

// store is the in-memory data behind the resolvers. Every method copies what
// it returns, so callers never share memory with the store and a concurrent
// createIssue cannot change a slice a resolver is still reading.
type store struct {
	mu        sync.RWMutex
	users     map[string]*userRecord // by login
	logins    []string               // users in seeding order, for search
	repos     map[string]*repoRecord // by name, unique across users
	repoNames []string               // repositories in seeding order
	issues    map[string]string      // issue ID -> repository name
	nextIssue int
	// watchers are the issueCreated subscriptions, by repository name.
	watchers map[string]map[*watcher]struct{}
}

// watcher is one issueCreated subscription: createIssue sends it each new
// issue of its repository without waiting.
type watcher struct{ issues chan *model.Issue }

// watcherBuffer is how many issues a subscription may fall behind before
// createIssue drops the next ones for it rather than wait for its reader.
const watcherBuffer = 64

func newStore() *store {
	return &store{
		users:    make(map[string]*userRecord),
		repos:    make(map[string]*repoRecord),
		issues:   make(map[string]string),
		watchers: make(map[string]map[*watcher]struct{}),
	}
}

// watch subscribes to the issues opened in repo until ctx ends, when the
// channel is closed.
func (s *store) watch(ctx context.Context, repo string) (<-chan *model.Issue, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.repos[repo]; !ok {
		return nil, fmt.Errorf("%w: repository %q", ErrNotFound, repo)
	}
	w := &watcher{issues: make(chan *model.Issue, watcherBuffer)}
	if s.watchers[repo] == nil {
		s.watchers[repo] = make(map[*watcher]struct{})
	}
	s.watchers[repo][w] = struct{}{}
	context.AfterFunc(ctx, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		delete(s.watchers[repo], w)
		if len(s.watchers[repo]) == 0 {
			delete(s.watchers, repo)
		}
		close(w.issues) // under s.mu: createIssue never sends on it again
	})
	return w.issues, nil
}

func (s *store) user(login string) (*model.User, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	u, ok := s.users[login]
	if !ok {
		return nil, false
	}
	c := u.user
	return &c, true
}

func (s *store) repository(name string) (*model.Repository, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	r, ok := s.repos[name]
	if !ok {
		return nil, false
	}
	return copyRepo(r.repo), true
}

func (s *store) issue(id string) (*model.Issue, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	name, ok := s.issues[id]
	if !ok {
		return nil, false
	}
	for _, is := range s.repos[name].issues {
		if is.ID == id {
			c := is
			return &c, true
		}
	}
	return nil, false
}

// node returns the object with this global ID, or nil.
func (s *store) node(id string) model.Node {
	switch {
	case strings.HasPrefix(id, userIDPrefix):
		if u, ok := s.user(strings.TrimPrefix(id, userIDPrefix)); ok {
			return u
		}
	case strings.HasPrefix(id, repoIDPrefix):
		if repo, ok := s.repository(strings.TrimPrefix(id, repoIDPrefix)); ok {
			return repo
		}
	case strings.HasPrefix(id, issueIDPrefix):
		if is, ok := s.issue(id); ok {
			return is
		}
	}
	return nil
}

// reposOf returns login's repositories, sliced by first and last.
func (s *store) reposOf(login string, first, last *int) ([]*model.Repository, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	u, ok := s.users[login]
	if !ok {
		return []*model.Repository{}, nil
	}
	lo, hi, err := window(len(u.repos), first, last)
	if err != nil {
		return nil, err
	}
	out := make([]*model.Repository, 0, hi-lo)
	for _, name := range u.repos[lo:hi] {
		out = append(out, copyRepo(s.repos[name].repo))
	}
	return out, nil
}

// issuesOf returns the repository's issues, sliced by first and last.
func (s *store) issuesOf(repo string, first, last *int) ([]*model.Issue, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	r, ok := s.repos[repo]
	if !ok {
		return []*model.Issue{}, nil
	}
	lo, hi, err := window(len(r.issues), first, last)
	if err != nil {
		return nil, err
	}
	out := make([]*model.Issue, 0, hi-lo)
	for _, is := range r.issues[lo:hi] {
		c := is
		out = append(out, &c)
	}
	return out, nil
}

// recentIssuesOf returns at most limit issues of login's repositories,
// newest first (defaultRecentIssues when limit is nil). It merges the
// repositories' lists from their newest ends, so it reads no more issues
// than it returns, however many the repositories hold.
func (s *store) recentIssuesOf(login string, limit *int) ([]*model.Issue, error) {
	n := defaultRecentIssues
	if limit != nil {
		if *limit < 0 {
			return nil, fmt.Errorf("%w: limit must not be negative, got %d", ErrInvalidArgument, *limit)
		}
		n = *limit
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	u, ok := s.users[login]
	if !ok {
		return []*model.Issue{}, nil
	}
	// lists[i] is what is left to merge of u.repos[i]'s issues (oldest
	// first): its newest is its last.
	lists := make([][]model.Issue, len(u.repos))
	total := 0
	for i, name := range u.repos {
		lists[i] = s.repos[name].issues
		total += len(lists[i])
	}
	out := make([]*model.Issue, 0, min(n, total))
	for len(out) < n {
		newest, number := -1, -1
		for i, l := range lists {
			if len(l) > 0 && issueNumber(l[len(l)-1].ID) > number {
				newest, number = i, issueNumber(l[len(l)-1].ID)
			}
		}
		if newest < 0 {
			break
		}
		l := lists[newest]
		c := l[len(l)-1]
		out = append(out, &c)
		lists[newest] = l[:len(l)-1]
	}
	return out, nil
}

// issueNumber is the creation sequence number an issue ID carries.
func issueNumber(id string) int {
	n, _ := strconv.Atoi(strings.TrimPrefix(id, issueIDPrefix))
	return n
}

// followersOf returns the first n followers of login and how many there are.
func (s *store) followersOf(login string, first int) ([]*model.User, int, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	u, ok := s.users[login]
	if !ok {
		return []*model.User{}, 0, nil
	}
	lo, hi, err := window(len(u.followers), &first, nil)
	if err != nil {
		return nil, 0, err
	}
	out := make([]*model.User, 0, hi-lo)
	for _, f := range u.followers[lo:hi] {
		c := s.users[f].user
		out = append(out, &c)
	}
	return out, len(u.followers), nil
}

// search matches query case-insensitively against user logins and names,
// repository names and issue titles; users come first, then repositories,
// then issues, each in seeding (then creation) order. first nil means all.
func (s *store) search(query string, first *int) ([]model.SearchResult, error) {
	limit := -1
	if first != nil {
		if *first < 0 {
			return nil, fmt.Errorf("%w: first must not be negative, got %d", ErrInvalidArgument, *first)
		}
		limit = *first
	}
	q := strings.ToLower(query)
	match := func(s string) bool { return strings.Contains(strings.ToLower(s), q) }
	full := func(out []model.SearchResult) bool { return limit >= 0 && len(out) >= limit }

	s.mu.RLock()
	defer s.mu.RUnlock()
	out := []model.SearchResult{}
	for _, login := range s.logins {
		if full(out) {
			return out, nil
		}
		u := s.users[login].user
		if match(u.Login) || (u.Name != nil && match(*u.Name)) {
			out = append(out, &u)
		}
	}
	for _, name := range s.repoNames {
		if full(out) {
			return out, nil
		}
		if r := s.repos[name]; match(r.repo.Name) {
			out = append(out, copyRepo(r.repo))
		}
	}
	for _, name := range s.repoNames {
		for _, is := range s.repos[name].issues {
			if full(out) {
				return out, nil
			}
			if match(is.Title) {
				c := is
				out = append(out, &c)
			}
		}
	}
	return out, nil
}

// recommendationsFor returns at most n repositories owned by other users
// than login, in seeding order.
func (s *store) recommendationsFor(login string, n int) []*model.Repository {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]*model.Repository, 0, n)
	for _, name := range s.repoNames {
		if len(out) == n {
			break
		}
		if r := s.repos[name]; r.repo.OwnerLogin != login {
			out = append(out, copyRepo(r.repo))
		}
	}
	return out
}

// createIssue appends a new issue to the named repository.
func (s *store) createIssue(repo, title string) (*model.Issue, error) {
	title = strings.TrimSpace(title)
	if title == "" {
		return nil, fmt.Errorf("%w: title must not be empty", ErrInvalidArgument)
	}
	if n := utf8.RuneCountInString(title); n > MaxTitleLength {
		return nil, fmt.Errorf("%w: title is %d characters, at most %d allowed", ErrInvalidArgument, n, MaxTitleLength)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.repos[repo]
	if !ok {
		return nil, fmt.Errorf("%w: repository %q", ErrNotFound, repo)
	}
	if len(r.issues) >= MaxIssuesPerRepository {
		return nil, fmt.Errorf("%w: %q has %d issues", ErrRepositoryFull, repo, len(r.issues))
	}
	is := s.appendIssue(r, title, nil)
	for w := range s.watchers[repo] {
		event := is
		select {
		case w.issues <- &event:
		default: // the subscriber is watcherBuffer issues behind: it misses this one
		}
	}
	return &is, nil
}

// appendIssue adds an issue to r. The caller holds s.mu for writing.
func (s *store) appendIssue(r *repoRecord, title string, body *string) model.Issue {
	s.nextIssue++
	is := model.Issue{ID: issueIDPrefix + strconv.Itoa(s.nextIssue), Title: title, Body: body}
	r.issues = append(r.issues, is)
	s.issues[is.ID] = r.repo.Name
	return is
}

// window turns first/last into the bounds [lo, hi) of a list of n items:
// first keeps the first items, then last keeps the last of those, as in
// GitHub's API. Negative values are rejected.
func window(n int, first, last *int) (lo, hi int, err error) {
	if first != nil && *first < 0 {
		return 0, 0, fmt.Errorf("%w: first must not be negative, got %d", ErrInvalidArgument, *first)
	}
	if last != nil && *last < 0 {
		return 0, 0, fmt.Errorf("%w: last must not be negative, got %d", ErrInvalidArgument, *last)
	}
	lo, hi = 0, n
	if first != nil && *first < hi {
		hi = *first
	}
	if last != nil && *last < hi-lo {
		lo = hi - *last
	}
	return lo, hi, nil
}

func copyRepo(r model.Repository) *model.Repository {
	r.Topics = slices.Clone(r.Topics)
	return &r
}
