module github.com/costguard/costguard/examples/cost

go 1.26.0

replace github.com/costguard/costguard => ../..

require (
	github.com/costguard/costguard v0.0.0-00010101000000-000000000000
	github.com/vektah/gqlparser/v2 v2.5.26
	go.yaml.in/yaml/v3 v3.0.5
)

require github.com/agnivade/levenshtein v1.2.1 // indirect
