module github.com/floodgate/floodgate/bench

go 1.26.8

replace github.com/floodgate/floodgate => ../

require (
	github.com/bradfitz/gomemcache v0.0.0-20260422231931-4d751bb6e37c
	github.com/floodgate/floodgate v0.0.0-00010101000000-000000000000
	go.uber.org/ratelimit v0.3.1
	golang.org/x/time v0.16.0
)

require github.com/benbjohnson/clock v1.3.0 // indirect
