module github.com/costguard/costguard/identity/pgkeys

go 1.26.0

replace github.com/costguard/costguard => ../..

replace github.com/costguard/costguard/internal/pgtest => ../../internal/pgtest

require (
	github.com/costguard/costguard v0.0.0-00010101000000-000000000000
	github.com/costguard/costguard/internal/pgtest v0.0.0-00010101000000-000000000000
	github.com/jackc/pgx/v5 v5.5.0
)

require (
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20221227161230-091c0ba34f0a // indirect
	github.com/jackc/puddle/v2 v2.2.1 // indirect
	golang.org/x/crypto v0.9.0 // indirect
	golang.org/x/sync v0.13.0 // indirect
	golang.org/x/text v0.9.0 // indirect
)
