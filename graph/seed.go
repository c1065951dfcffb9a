package graph

import "github.com/costguard/costguard/graph/model"

// The seeded data set. Tests and the README rely on its shape: octocat owns
// at least three repositories of at least two issues each, and repository
// names are unique across users.
type seedRepo struct {
	name   string
	topics []string
	issues []seedIssue
}

type seedIssue struct {
	title string
	body  string // "" seeds a null body
}

type seedUser struct {
	login, name string // name "" seeds a null name
	repos       []seedRepo
	followers   []string
}

var seedUsers = []seedUser{
	{
		login: "octocat", name: "The Octocat",
		followers: []string{"alice", "bob", "carol"},
		repos: []seedRepo{
			{name: "hello-world", topics: []string{"example", "getting-started"}, issues: []seedIssue{
				{"Add a README", "The repository has no README yet.\n\nIt should say what this is."},
				{"Greeting is not localised", "Say hello in more than one language."},
				{"Typo in the greeting", ""},
			}},
			{name: "spoon-knife", topics: []string{"forking", "example"}, issues: []seedIssue{
				{"Fork count is wrong", "The counter shows one fork too many."},
				{"Use <em>semantic</em> markup", "Headings should be <h1>, not <b>."},
			}},
			{name: "linguist", topics: []string{"languages", "syntax", "ruby"}, issues: []seedIssue{
				{"Detect GraphQL files", "`.graphqls` should be classified as GraphQL."},
				{"Vendored code counted as source", ""},
			}},
			{name: "octocat.github.io", topics: []string{"pages"}, issues: []seedIssue{
				{"Broken link in footer", "The footer links to a page that moved."},
				{"Dark mode", ""},
			}},
		},
	},
	{
		login: "alice", name: "Alice Liddell",
		followers: []string{"octocat"},
		repos: []seedRepo{
			{name: "wonderland", topics: []string{"fiction"}, issues: []seedIssue{
				{"Rabbit hole has no bottom", "Falling takes far too long."},
				{"Tea party never ends", ""},
			}},
			{name: "looking-glass", topics: []string{"fiction", "chess"}, issues: []seedIssue{
				{"Text renders mirrored", "Everything reads backwards."},
			}},
		},
	},
	{
		login:     "bob", // no name: a nullable field that is actually null
		followers: []string{"alice"},
		repos: []seedRepo{
			{name: "build-tools", topics: []string{"ci", "make"}, issues: []seedIssue{
				{"Cache the module download", "CI downloads every module on every run."},
				{"Flaky test on slow machines", ""},
			}},
		},
	},
	{
		login: "carol", name: "Carol Danvers",
	},
}

// seed fills an empty store with seedUsers.
func (s *store) seed() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, su := range seedUsers {
		u := &userRecord{user: model.User{ID: userIDPrefix + su.login, Login: su.login, Name: optional(su.name)}}
		u.followers = append(u.followers, su.followers...)
		for _, sr := range su.repos {
			r := &repoRecord{repo: model.Repository{
				ID: repoIDPrefix + sr.name, Name: sr.name, OwnerLogin: su.login, Topics: sr.topics,
			}}
			s.repos[sr.name] = r
			s.repoNames = append(s.repoNames, sr.name)
			u.repos = append(u.repos, sr.name)
			for _, si := range sr.issues {
				s.appendIssue(r, si.title, optional(si.body))
			}
		}
		s.users[su.login] = u
		s.logins = append(s.logins, su.login)
	}
}

func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
