package policy

import (
	"strings"
	"testing"
	"testing/fstest"
)

// A configuration file system whose files all lack a YAML extension (a
// Kubernetes ConfigMap key named config mounts as a file named config) is
// a load error naming the files and saying to name them *.yaml, rather than
// a configuration of no domain that allows everything; hidden files only,
// or none, still load with no domain, and a YAML file beside other files
// loads as before. Load's directories: loadfs_dir_test.go.
func TestLoadFSRefusesUnreadFiles(t *testing.T) {
	rules := []byte(watchLimit("5"))
	if _, err := LoadFS(fstest.MapFS{"config": {Data: rules}}, "cm/"); err == nil ||
		!strings.Contains(err.Error(), "only cm/config, which are not read") {
		t.Errorf("LoadFS of a file named config: %v, want an error naming cm/config", err)
	}
	if cfg, err := LoadFS(fstest.MapFS{"config.yaml": {Data: rules}, "README": {Data: []byte("x")}}, ""); err != nil || cfg.Domain("live") == nil {
		t.Errorf("LoadFS of config.yaml and a README: %v", err)
	}
	if _, err := LoadFS(fstest.MapFS{".hidden": {Data: rules}}, ""); err != nil {
		t.Errorf("LoadFS of a hidden file only: %v, want no domain, no error", err)
	}
	many := fstest.MapFS{}
	for _, n := range []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l"} {
		many[n] = &fstest.MapFile{Data: rules}
	}
	if _, err := LoadFS(many, ""); err == nil || !strings.Contains(err.Error(), "a, b, c, d, e, f, g, h, i, j and 2 more") {
		t.Errorf("LoadFS of 12 unread files: %v, want ten named and 2 more", err)
	}
}
