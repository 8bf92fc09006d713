package policy

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// A configuration directory whose files all lack a YAML extension — a
// Kubernetes ConfigMap key named config mounts as a file named config, a
// link into ..data — was loaded as a configuration of no domain, with a
// warning: the server started and allowed everything (envoyproxy/ratelimit
// reads every file). Such a directory is now a load error naming the files
// and saying to name them *.yaml; an empty directory, or one of hidden
// files only, still loads with no domain, and a YAML file beside other
// files loads as before.

// kubeConfigMap lays out dir as the kubelet mounts a ConfigMap with one key
// named key: dir/..2026_01_01_00_00_00.1/key, dir/..data a link to that
// directory, dir/key a link to ..data/key.
func kubeConfigMap(t *testing.T, dir, key, content string) {
	t.Helper()
	ts := filepath.Join(dir, "..2026_01_01_00_00_00.1")
	if err := os.MkdirAll(ts, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ts, key), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("..2026_01_01_00_00_00.1", filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join("..data", key), filepath.Join(dir, key)); err != nil {
		t.Fatal(err)
	}
}

func TestLoadRefusesADirectoryOfUnreadFiles(t *testing.T) {
	rules := watchLimit("5")
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, dir string)
		want  string // "" loads; else the error names it
	}{
		{"ConfigMap key config", func(t *testing.T, dir string) { kubeConfigMap(t, dir, "config", rules) }, "/config, which are not read"},
		{"plain file config", func(t *testing.T, dir string) { writeRuleFile(t, filepath.Join(dir, "config"), rules) }, "/config, which are not read"},
		{"a .json and a .txt", func(t *testing.T, dir string) {
			writeRuleFile(t, filepath.Join(dir, "rules.json"), rules)
			writeRuleFile(t, filepath.Join(dir, "sub", "notes.txt"), "x")
		}, "rules.json, "},
		{"ConfigMap key config.yaml", func(t *testing.T, dir string) { kubeConfigMap(t, dir, "config.yaml", rules) }, ""},
		{"a YAML file beside a README", func(t *testing.T, dir string) {
			writeRuleFile(t, filepath.Join(dir, "rules.YML"), rules)
			writeRuleFile(t, filepath.Join(dir, "README"), "x")
		}, ""},
		{"empty", func(t *testing.T, dir string) {}, ""},
		{"hidden files only", func(t *testing.T, dir string) { writeRuleFile(t, filepath.Join(dir, ".rules.swp"), "x") }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			tc.setup(t, dir)
			cfg, err := Load(dir)
			probs := Validate(dir)
			if tc.want == "" {
				if err != nil || len(probs) > 0 {
					t.Fatalf("Load: %v; Validate: %v; want it loaded", err, probs)
				}
				if strings.HasPrefix(tc.name, "empty") || strings.HasPrefix(tc.name, "hidden") {
					if w := warningLines(cfg); !strings.Contains(w, "no *.yaml or *.yml files in the directory") {
						t.Errorf("warnings %q, want the no-files warning", w)
					}
				} else if cfg.Domain("live") == nil {
					t.Errorf("domain live not loaded")
				}
				return
			}
			if err == nil {
				t.Fatalf("Load: loaded (domains %d), want an error naming the files", len(cfg.Domains()))
			}
			for _, s := range []string{dir + ": ", tc.want, "*.yaml", "every request is allowed"} {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("Load: %v; want it to say %q", err, s)
				}
			}
			if len(probs) != 1 || probs[0].File != dir {
				t.Errorf("Validate: %v, want the one problem of %s", probs, dir)
			}
		})
	}
}

// A reload that finds the directory's YAML files renamed to names it does
// not read keeps the rules in force and reports the error; naming them
// back loads them.
func TestWatcherRefusesUnreadFiles(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		yaml, plain := filepath.Join(dir, "rules.yaml"), filepath.Join(dir, "rules")
		writeRuleFile(t, yaml, watchLimit("5"))
		var c calls
		w, err := NewWatcher(dir, time.Second, func(cfg *Config, err error) { c.add(quotaOf(cfg, err)) })
		if err != nil {
			t.Fatal(err)
		}
		if cfg, err := w.Load(); err != nil || quotaOf(cfg, nil) != "5" {
			t.Fatalf("first load: %v", err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go w.Run(ctx)
		if err := os.Rename(yaml, plain); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		got := c.list()
		if len(got) != 1 || !strings.Contains(got[0], "error: "+dir+": no *.yaml or *.yml file, only "+plain) {
			t.Fatalf("a reload of the renamed file: fn got %q, want the error naming %s", got, plain)
		}
		if err := os.Rename(plain, yaml); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if got := c.list(); got[len(got)-1] != "5" {
			t.Fatalf("named back: fn got %q, want 5", got)
		}
		cancel()
	})
}

func writeRuleFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
