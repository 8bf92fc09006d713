package policy

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"testing/synctest"
	"time"
)

// A file that is not *.yaml or *.yml beside one that is was skipped
// without a word: `floodgate validate` said valid, and a Kubernetes
// ConfigMap's second key named config (envoyproxy/ratelimit reads every
// file of its directory) lost its limits silently. Each such file is now a
// warning; hidden files, and the ..data entries of a ConfigMap mount, are
// still skipped quietly.

const skippedMessage = ": skipped: not a .yaml or .yml file; rename it to load it"

// kubeConfigMapKeys lays out dir as the kubelet mounts a ConfigMap with
// the keys of files: each key a file in dir/..2026_01_01_00_00_00.1,
// dir/..data a link to that directory, dir/key a link to ..data/key.
func kubeConfigMapKeys(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	ts := filepath.Join(dir, "..2026_01_01_00_00_00.1")
	if err := os.MkdirAll(ts, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("..2026_01_01_00_00_00.1", filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	for key, content := range files {
		if err := os.WriteFile(filepath.Join(ts, key), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join("..data", key), filepath.Join(dir, key)); err != nil {
			t.Fatal(err)
		}
	}
}

func TestLoadWarnsOfSkippedFiles(t *testing.T) {
	rules := watchLimit("5")
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, dir string)
		want  []string // the warnings, each after dir + "/"
	}{
		{"a file named config beside c.yaml", func(t *testing.T, dir string) {
			writeRuleFile(t, filepath.Join(dir, "c.yaml"), rules)
			writeRuleFile(t, filepath.Join(dir, "config"), watchLimit("7"))
		}, []string{"config" + skippedMessage}},
		{"ConfigMap keys rules.yaml and config", func(t *testing.T, dir string) {
			kubeConfigMapKeys(t, dir, map[string]string{"rules.yaml": rules, "config": "domain: other\n"})
		}, []string{"config" + skippedMessage}},
		{"files in a subdirectory, a README, a JSON", func(t *testing.T, dir string) {
			writeRuleFile(t, filepath.Join(dir, "c.yml"), rules)
			writeRuleFile(t, filepath.Join(dir, "README.md"), "x")
			writeRuleFile(t, filepath.Join(dir, "sub", "limits.json"), "{}")
		}, []string{"sub/limits.json" + skippedMessage}},
		{"the Go file that embeds the directory", func(t *testing.T, dir string) {
			writeRuleFile(t, filepath.Join(dir, "c.yaml"), rules)
			writeRuleFile(t, filepath.Join(dir, "embed.go"), "package config\n")
		}, nil},
		{"hidden files and directories", func(t *testing.T, dir string) {
			writeRuleFile(t, filepath.Join(dir, "c.yaml"), rules)
			writeRuleFile(t, filepath.Join(dir, ".c.yaml.swp"), "x")
			writeRuleFile(t, filepath.Join(dir, ".git", "config"), "x")
		}, nil},
		{"a link to a directory", func(t *testing.T, dir string) {
			writeRuleFile(t, filepath.Join(dir, "c.yaml"), rules)
			if err := os.Symlink(t.TempDir(), filepath.Join(dir, "old")); err != nil {
				t.Fatal(err)
			}
		}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			tc.setup(t, dir)
			var want []string
			for _, w := range tc.want {
				want = append(want, filepath.Join(dir, w))
			}
			cfg, err := Load(dir)
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if cfg.Domain("live") == nil || len(cfg.Domains()) != 1 {
				t.Fatalf("domains %q, want just live", cfg.Dump())
			}
			if got := problemLines(cfg.Warnings()); !equalLines(got, want) {
				t.Errorf("Load: warnings\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			_, warns, err := LoadWithWarnings(dir)
			if got := problemLines(warns); err != nil || !equalLines(got, want) {
				t.Errorf("LoadWithWarnings: %v, warnings\n%s\nwant\n%s", err, strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			if ps := Validate(dir); len(ps) != 0 {
				t.Errorf("Validate: %v, want valid", ps)
			}
		})
	}
}

// An invalid configuration's warnings, which validate prints after its
// problems, include the skipped files.
func TestLoadWithWarningsSkippedInvalid(t *testing.T) {
	dir := t.TempDir()
	writeRuleFile(t, filepath.Join(dir, "c.yaml"), "domain: live\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 5}\n")
	writeRuleFile(t, filepath.Join(dir, "config"), "x")
	cfg, warns, err := LoadWithWarnings(dir)
	if err == nil || cfg != nil {
		t.Fatalf("LoadWithWarnings: %v, want the unit's problem", err)
	}
	want := []string{filepath.Join(dir, "config") + skippedMessage}
	if got := problemLines(warns); !equalLines(got, want) {
		t.Errorf("warnings %q, want %q", got, want)
	}
}

// More than maxSkippedNames files skipped: each of the first ten is named,
// the rest counted in one warning on the directory.
func TestLoadWarnsOfManySkippedFiles(t *testing.T) {
	dir := t.TempDir()
	writeRuleFile(t, filepath.Join(dir, "c.yaml"), watchLimit("5"))
	var want []string
	for i := range maxSkippedNames + 3 {
		name := "note" + strconv.Itoa(10+i) + ".txt"
		writeRuleFile(t, filepath.Join(dir, name), "x")
		if i < maxSkippedNames {
			want = append(want, filepath.Join(dir, name)+skippedMessage)
		}
	}
	want = append([]string{dir + ": skipped 3 more files, from " + filepath.Join(dir, "note20.txt") +
		" on: not .yaml or .yml files; rename them to load them"}, want...)
	cfg, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := problemLines(cfg.Warnings()); !equalLines(got, want) {
		t.Errorf("warnings\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// The repository's example directory, which `make run` loads from disk,
// loads without a warning: its embed.go is the Go package that embeds it.
func TestExampleConfigNoSkippedWarning(t *testing.T) {
	cfg, err := Load("../examples/config")
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range cfg.Warnings() {
		if strings.Contains(w.Message, "skipped") {
			t.Errorf("warning %s", w)
		}
	}
}

// The files a configuration directory commonly holds beside its rules
// that are plainly not rules (documentation, an editor's backup) are
// skipped quietly; a name that may be a rules file the user meant to load
// is still warned of. examples/gateway's README.md was warned of at every
// start of the README's own gateway command.
func TestLoadSkipsDocumentationQuietly(t *testing.T) {
	quiet := []string{"README.md", "README", "readme.txt", "Readme.markdown", "LICENSE", "NOTICE.txt", "OWNERS",
		"docs/notes.md", "guide.rst", "guide.adoc", "c.yaml~", "config~", "#c.yaml#", "embed.go"}
	warned := []string{"rules.yml.bak", "rules.json", "rules.yaml.txt", "rules.yaml.md", "limits.json.md",
		"notes.txt", "config", "c.yaml.orig", "c.yaml.swp", "README.json"}
	for _, tc := range []struct {
		name string
		load func(t *testing.T, files []string) ([]string, string)
	}{
		{"Load", func(t *testing.T, files []string) ([]string, string) {
			dir := t.TempDir()
			writeRuleFile(t, filepath.Join(dir, "c.yaml"), watchLimit("5"))
			for _, f := range files {
				writeRuleFile(t, filepath.Join(dir, f), "x")
			}
			cfg, err := Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			return problemLines(cfg.Warnings()), dir + "/"
		}},
		{"LoadFS", func(t *testing.T, files []string) ([]string, string) {
			fsys := fstest.MapFS{"c.yaml": {Data: []byte(watchLimit("5"))}}
			for _, f := range files {
				fsys[f] = &fstest.MapFile{Data: []byte("x")}
			}
			cfg, err := LoadFS(fsys, "cm/")
			if err != nil {
				t.Fatal(err)
			}
			return problemLines(cfg.Warnings()), "cm/"
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, prefix := tc.load(t, append(slices.Clone(quiet), warned...))
			var want []string
			for _, f := range slices.Sorted(slices.Values(warned)) {
				want = append(want, prefix+f+skippedMessage)
			}
			slices.Sort(got)
			slices.Sort(want)
			if !equalLines(got, want) {
				t.Errorf("warnings\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
		})
	}
}

// The README's gateway command loads examples/gateway, which holds the
// README itself: it loads without a warning of a skipped file.
func TestExampleGatewayNoSkippedWarning(t *testing.T) {
	_, warns, err := LoadWithWarnings("../examples/gateway")
	for _, w := range warns {
		if strings.Contains(w.Message, "skipped") {
			t.Errorf("warning %s", w)
		}
	}
	if err != nil && strings.Contains(err.Error(), "skipped") {
		t.Errorf("error %v", err)
	}
}

func TestLoadFSWarnsOfSkippedFiles(t *testing.T) {
	cfg, err := LoadFS(fstest.MapFS{
		"config.yaml": {Data: []byte(watchLimit("5"))},
		"config":      {Data: []byte("x")},
		".hidden":     {Data: []byte("x")},
	}, "cm/")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"cm/config" + skippedMessage}
	if got := problemLines(cfg.Warnings()); !equalLines(got, want) {
		t.Errorf("warnings %q, want %q", got, want)
	}
}

// A file that is not YAML added to a watched directory is a change: the
// reload's configuration carries its warning (which serve logs), and its
// rules are the same.
func TestWatcherWarnsOfAddedSkippedFile(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		writeRuleFile(t, filepath.Join(dir, "c.yaml"), watchLimit("5"))
		var mu sync.Mutex
		var got [][]string
		w, err := NewWatcher(dir, time.Second, func(cfg *Config, err error) {
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				got = append(got, []string{"error: " + err.Error()})
				return
			}
			got = append(got, append([]string{quotaOf(cfg, nil)}, problemLines(cfg.Warnings())...))
		})
		if err != nil {
			t.Fatal(err)
		}
		if cfg, err := w.Load(); err != nil || len(cfg.Warnings()) != 0 {
			t.Fatalf("first load: %v, warnings %v", err, cfg.Warnings())
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go w.Run(ctx)
		writeRuleFile(t, filepath.Join(dir, "config"), watchLimit("7"))
		time.Sleep(2 * time.Second)
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		want := []string{"5", filepath.Join(dir, "config") + skippedMessage}
		if len(got) != 1 || !equalLines(got[0], want) {
			t.Fatalf("fn got %q, want one call with %q", got, want)
		}
	})
}

func problemLines(ps Problems) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.String())
	}
	return out
}

func equalLines(a, b []string) bool {
	return strings.Join(a, "\n") == strings.Join(b, "\n")
}
