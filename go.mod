module github.com/floodgate/floodgate

go 1.26.8

require github.com/bradfitz/gomemcache v0.0.0-20260422231931-4d751bb6e37c

require (
	go.yaml.in/yaml/v3 v3.0.6 // indirect
	golang.org/x/image v0.48.0 // indirect
	golang.org/x/sys v0.50.0 // indirect
)
