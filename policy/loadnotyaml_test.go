package policy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A file named on its own is loaded whatever its name; when it is not
// YAML and not named .yaml or .yml, the YAML error says that it may not be
// the configuration (validate examples/config/embed.go said only "mapping
// values are not allowed in this context"). A valid one loads.
func TestLoadFileNotYAMLSaysSo(t *testing.T) {
	dir := t.TempDir()
	goFile := filepath.Join(dir, "embed.go")
	if err := os.WriteFile(goFile, []byte("package config\n\nimport \"embed\"\n\nvar x embed.FS\n//go:embed *.yaml\nvar Files embed.FS: x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, err := LoadWithWarnings(goFile)
	if err == nil || !strings.Contains(err.Error(), "YAML syntax error") || !strings.Contains(err.Error(), "embed.go is not a .yaml or .yml file: is it the configuration?") {
		t.Errorf("LoadWithWarnings(%s) = %v, want the YAML error with the hint", goFile, err)
	}
	conf := filepath.Join(dir, "limits.conf")
	if err := os.WriteFile(conf, []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 5}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := LoadWithWarnings(conf); err != nil {
		t.Errorf("LoadWithWarnings(%s) = %v, want it loaded", conf, err)
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("a: b: c\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := LoadWithWarnings(bad); err == nil || strings.Contains(err.Error(), "is it the configuration") {
		t.Errorf("LoadWithWarnings(%s) = %v, want the YAML error without the hint", bad, err)
	}
}
