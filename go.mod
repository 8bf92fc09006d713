module github.com/floodgate/floodgate

go 1.26.8

require (
	go.yaml.in/yaml/v3 v3.0.6 // indirect
	golang.org/x/image v0.48.0 // indirect
)
