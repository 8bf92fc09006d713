// Package config embeds the example configuration so that `floodgate serve`
// started anywhere, not only from the repository root, runs with it by
// default (contract: the default configuration is the example one).
package config

import "embed"

// FS holds every *.yaml file of this directory.
//
//go:embed *.yaml
var FS embed.FS
