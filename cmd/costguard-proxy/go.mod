module github.com/costguard/costguard/cmd/costguard-proxy

go 1.26.0

replace github.com/costguard/costguard => ../..

require (
	github.com/99designs/gqlgen v0.17.73
	github.com/costguard/costguard v0.0.0-00010101000000-000000000000
	github.com/gorilla/websocket v1.5.0
	github.com/vektah/gqlparser/v2 v2.5.26
)

require (
	github.com/agnivade/levenshtein v1.2.1 // indirect
	github.com/go-viper/mapstructure/v2 v2.2.1 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/hashicorp/golang-lru/v2 v2.0.7 // indirect
	github.com/sosodev/duration v1.3.1 // indirect
	golang.org/x/sync v0.13.0 // indirect
)
