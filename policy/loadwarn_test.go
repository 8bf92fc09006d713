package policy

import (
	"os"
	"path/filepath"
	"testing"
)

// TestLoadWithWarningsKeepsWarningsOfInvalid: a file with a problem and a
// warning loads as Load does (no Config, the problem as the error), and
// LoadWithWarnings returns the warning as well, at its line; for a valid
// file the warnings are the Config's.
func TestLoadWithWarningsKeepsWarningsOfInvalid(t *testing.T) {
	dir := t.TempDir()
	bad, good := filepath.Join(dir, "bad.yaml"), filepath.Join(dir, "good.yaml")
	ignored := "      shadow_mode: true\n"
	for name, rpu := range map[string]string{bad: "-5", good: "5"} {
		data := "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: " + rpu + "\n" + ignored
		if err := os.WriteFile(name, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cfg, warns, err := LoadWithWarnings(bad)
	if cfg != nil || err == nil || err.Error() != bad+":6: requests_per_unit must be >= 0, got -5" {
		t.Fatalf("LoadWithWarnings(bad) = %v, %v; want no Config and the problem at line 6", cfg, err)
	}
	if len(warns) != 1 || warns[0].File != bad || warns[0].Line != 7 {
		t.Fatalf("LoadWithWarnings(bad) warnings = %v, want the shadow_mode warning at line 7", warns)
	}
	cfg, warns, err = LoadWithWarnings(good)
	if err != nil {
		t.Fatal(err)
	}
	if len(warns) != 1 || warns[0].Line != 7 || len(cfg.Warnings()) != 1 || cfg.Warnings()[0] != warns[0] {
		t.Fatalf("LoadWithWarnings(good) warnings = %v, Config.Warnings = %v; want the same one at line 7", warns, cfg.Warnings())
	}
}
