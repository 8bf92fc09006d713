package gateway_test

import (
	"testing"

	"github.com/floodgate/floodgate/policy"
)

// FuzzSection: any gateway section loads or fails with problems; the loader
// never panics on it.
func FuzzSection(f *testing.F) {
	f.Add("  routes:\n    - {host: \"*.a.b\", path_prefix: /x, methods: [GET], descriptors: [{entries: [{source: path}]}]}\n")
	f.Add("  trusted_proxies: [::1/200]\n  routes: []\n")
	f.Add("  routes:\n    - descriptors: [{entries: [{source: \"header:\"}]}]\n")
	f.Fuzz(func(t *testing.T, body string) {
		cfg, err := policy.Parse("f.yaml", []byte("domain: edge\ngateway:\n"+body))
		if err == nil && cfg.Domain("edge") == nil {
			t.Fatal("no error and no domain")
		}
	})
}
