module github.com/costguard/costguard/cmd/costguard-proxy

go 1.26.0

replace github.com/costguard/costguard => ../..

require (
	github.com/99designs/gqlgen v0.17.73
	github.com/costguard/costguard v0.0.0-00010101000000-000000000000
	github.com/costguard/costguard/internal/serve v0.0.0-00010101000000-000000000000
	github.com/gorilla/websocket v1.5.0
	github.com/vektah/gqlparser/v2 v2.5.26
)

require (
	github.com/agnivade/levenshtein v1.2.1 // indirect
	github.com/beorn7/perks v1.0.1 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/costguard/costguard/identity/pgkeys v0.0.0-00010101000000-000000000000 // indirect
	github.com/costguard/costguard/middleware/prommetrics v0.0.0-00010101000000-000000000000 // indirect
	github.com/go-viper/mapstructure/v2 v2.2.1 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/hashicorp/golang-lru/v2 v2.0.7 // indirect
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/pgx/v5 v5.13.0 // indirect
	github.com/jackc/puddle/v2 v2.2.3 // indirect
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	github.com/prometheus/client_golang v1.25.0 // indirect
	github.com/prometheus/client_model v0.6.3 // indirect
	github.com/prometheus/common v0.72.0 // indirect
	github.com/prometheus/procfs v0.22.0 // indirect
	github.com/redis/go-redis/v9 v9.23.0 // indirect
	github.com/sosodev/duration v1.3.1 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	go.yaml.in/yaml/v3 v3.0.6 // indirect
	golang.org/x/sync v0.23.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
	golang.org/x/text v0.42.0 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)

replace github.com/costguard/costguard/internal/serve => ../../internal/serve

replace github.com/costguard/costguard/internal/pgtest => ../../internal/pgtest

replace github.com/costguard/costguard/identity/pgkeys => ../../identity/pgkeys

replace github.com/costguard/costguard/middleware/prommetrics => ../../middleware/prommetrics
