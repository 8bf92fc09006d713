package policy

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// warningLines renders a Config's warnings as floodgate validate prints
// them, one "file:line: warning: message" per line.
func warningLines(cfg *Config) string {
	var b strings.Builder
	for _, w := range cfg.Warnings() {
		w.Message = "warning: " + w.Message
		b.WriteString(w.String() + "\n")
	}
	return b.String()
}

// TestGoldenUpstream loads files envoyproxy/ratelimit loads (main as of
// 2026: its test configs and the mistakes its flat key check lets through)
// and compares their warnings and compiled rules with the golden files.
func TestGoldenUpstream(t *testing.T) {
	for _, path := range corpus(t, "testdata/upstream") {
		t.Run(path, func(t *testing.T) {
			cfg, err := Load(path)
			if err != nil {
				t.Fatalf("Load(%s):\n%v", path, err)
			}
			golden(t, goldenName(path), warningLines(cfg)+cfg.Dump())
		})
	}
}

// A key envoyproxy/ratelimit knows, at a level where it means nothing, is
// ignored there as well, and the rule behaves as upstream's: shadow_mode
// inside rate_limit does not shadow the rule, name on a descriptor does
// not name it, requests_per_unit on a descriptor does not change it.
func TestMisplacedKeysAreIgnored(t *testing.T) {
	for _, tc := range []struct {
		file, warning string
		rule, shadow  bool
		name          string
		quota         int64
	}{
		{"shadow_inside_rate_limit.yaml", `:8: warning: field "shadow_mode" is ignored in rate_limit, as envoyproxy/ratelimit ignores it there: this rule is enforced, not shadowed`,
			true, false, "foo", 5},
		{"name_on_descriptor.yaml", `:5: warning: field "name" is ignored in descriptor, as envoyproxy/ratelimit ignores it there; it belongs in rate_limit or a replaces entry`,
			true, false, "foo", 5},
		{"requests_per_unit_on_descriptor.yaml", `:5: warning: field "requests_per_unit" is ignored in descriptor, as envoyproxy/ratelimit ignores it there; it belongs in rate_limit`,
			true, false, "foo", 5},
	} {
		t.Run(tc.file, func(t *testing.T) {
			cfg, err := Load(filepath.Join("testdata/upstream", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			if w := warningLines(cfg); !strings.Contains(w, tc.warning) {
				t.Errorf("warnings:\n%swant one containing %q", w, tc.warning)
			}
			d := cfg.Domains()[0]
			r := cfg.Match(d.Name, ent("foo", "x"))
			if r == nil {
				t.Fatal("no rule for foo")
			}
			if r.Shadow != tc.shadow || r.Name != tc.name || r.Params.Limit != tc.quota {
				t.Errorf("rule %s: shadow %v, limit %d; want %s, shadow %v, limit %d", r.Name, r.Shadow, r.Params.Limit, tc.name, tc.shadow, tc.quota)
			}
			// Enforced: the sixth request in the second is refused.
			e := newMemEngine(t, cfg, frozen(time.Unix(1_800_000_000, 0)))
			var resp Response
			for range 6 {
				resp, err = e.Decide(context.Background(), req(d.Name, ent("foo", "x")))
				if err != nil {
					t.Fatal(err)
				}
			}
			if resp.Code != CodeOverLimit {
				t.Errorf("6th request: %s, want OVER_LIMIT (the rule is enforced)", resp)
			}
		})
	}
}

// A key envoyproxy/ratelimit does not know stays an error wherever it is,
// also within a misplaced field's value, which must pass its key check.
func TestMisplacedValueStillChecked(t *testing.T) {
	_, err := Load("testdata/bad/misplaced_unknown.yaml")
	var ps Problems
	if !errors.As(err, &ps) {
		t.Fatalf("Load = %v, want Problems", err)
	}
	for _, want := range []string{
		`:6: unknown field "algorithm" (within a field that is ignored here)`,
		`:10: a list here holds mappings only, got "just"`,
		`:11: burst applies to token_bucket, gcra and shaper, not fixed_window`,
		`:14: unknown field "hierarchy_level" in descriptor`,
	} {
		if !strings.Contains(ps.Error(), want) {
			t.Errorf("problems:\n%s\nwant one containing %q", ps.Error(), want)
		}
	}
}

// aliasBomb returns a file that hides 10^9 nodes behind aliases in a field
// envoyproxy/ratelimit ignores (name on a descriptor), whose keys are
// checked all the same.
func aliasBomb() string {
	keys := []string{"domain", "key", "value", "rate_limit", "unit", "requests_per_unit", "unlimited", "shadow_mode", "quota_mode", "name"}
	v := "&x0 {key: a}"
	for i := 1; i <= 9; i++ {
		parts := []string{keys[0] + ": " + v}
		for _, k := range keys[1:] {
			parts = append(parts, fmt.Sprintf("%s: *x%d", k, i-1))
		}
		v = fmt.Sprintf("&x%d {%s}", i, strings.Join(parts, ", "))
	}
	return "domain: bomb\ndescriptors:\n  - key: k\n    name: " + v + "\n    rate_limit: {unit: second, requests_per_unit: 1}\n"
}

// The check of an ignored field's value looks at each node once: an alias
// bomb there is checked at once, not in 10^9 steps.
func TestMisplacedAliasBomb(t *testing.T) {
	cfg, err := Parse("bomb.yaml", []byte(aliasBomb()))
	if err != nil {
		t.Fatal(err)
	}
	if w := cfg.Warnings(); len(w) != 1 || w[0].Line != 4 || !strings.HasPrefix(w[0].Message, `field "name" is ignored in descriptor`) {
		t.Fatalf("warnings %v, want the ignored name at line 4", w)
	}
}

// A field set twice takes its last value, as yaml.v2 gives it to
// envoyproxy/ratelimit; two rate_limit mappings are merged; each with a
// warning naming both lines.
func TestDuplicateFieldsLastWins(t *testing.T) {
	cfg, err := Load("testdata/upstream/duplicate_key.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if r := cfg.Match("dup", ent("a", "1")); r == nil || r.Unit != "minute" || r.Params.Limit != 10 {
		t.Errorf("a: %+v, want 10/minute (the second unit)", r)
	}
	if cfg.Match("dup", ent("b", "1")) != nil || cfg.Match("dup", ent("c", "1")) == nil {
		t.Error("key b then key c: want the descriptor keyed c")
	}
	if r := cfg.Match("dup", ent("d", "1")); r == nil || r.Name != "first" || r.Unit != "hour" || r.Params.Limit != 5 {
		t.Errorf("d: %+v, want name first, 5/hour (the mappings merged)", r)
	}
	if r := cfg.Match("dup", ent("e", "1")); r != nil {
		t.Errorf("e: %s, want no rule (the later rate_limit is empty)", r.Name)
	}
	w := warningLines(cfg)
	for _, want := range []string{
		`duplicate_key.yaml:9: warning: duplicate field "unit" in rate_limit (first at line 7): this one wins`,
		`duplicate_key.yaml:11: warning: duplicate field "key" in descriptor (first at line 10): this one wins`,
		`duplicate_key.yaml:18: warning: duplicate field "rate_limit" in descriptor (first at line 14): the two are merged, this one's fields winning`,
		`duplicate_key.yaml:19: warning: duplicate field "unit" in rate_limit (first at line 16): this one wins`,
		`duplicate_key.yaml:22: warning: duplicate field "rate_limit" in descriptor (first at line 21): this one wins`,
	} {
		if !strings.Contains(w, want) {
			t.Errorf("warnings:\n%swant one containing %q", w, want)
		}
	}
}

// Empty documents are skipped: a trailing "---" (Helm, kustomize) or one
// between documents. A file with no document at all is refused, as
// envoyproxy/ratelimit refuses it.
func TestEmptyDocuments(t *testing.T) {
	for name, src := range map[string]string{
		"trailing": "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n---\n",
		"leading":  "---\n---\ndomain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
		"between":  "---\ndomain: d\n--- # nothing here\n---\ndomain: e\n---\n~\n",
	} {
		cfg, err := Parse(name+".yaml", []byte(src))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if cfg.Domain("d") == nil {
			t.Errorf("%s: domain d not loaded", name)
		}
	}
	for name, src := range map[string]string{"nothing": "", "comments": "# only a comment\n", "dashes": "---\n---\n", "null": "null\n"} {
		_, err := Parse(name+".yaml", []byte(src))
		if err == nil || err.Error() != name+".yaml:1: config file cannot have empty domain: the file holds no YAML document (it is empty or only comments): write domain: <name> and its descriptors in it, or remove it" {
			t.Errorf("%s: %v, want the empty-domain problem", name, err)
		}
	}
}

// Several documents in one file are a Floodgate feature (a domain each);
// envoyproxy/ratelimit reads only the first, so a warning says which
// domains it would not load.
func TestSeveralDocumentsWarn(t *testing.T) {
	cfg, err := Load("testdata/upstream/two_documents.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Domains()) != 2 {
		t.Errorf("loaded %d domains, want 2", len(cfg.Domains()))
	}
	want := "testdata/upstream/two_documents.yaml:7: warning: this file holds 2 YAML documents and Floodgate loads a domain from each; " +
		"envoyproxy/ratelimit reads only the first, so it would not load \"e6b\"\n"
	if got := warningLines(cfg); got != want {
		t.Errorf("warnings:\n%swant\n%s", got, want)
	}
}

// An empty directory is a configuration without domains (as
// envoyproxy/ratelimit starts with none), with a warning; files put there
// later are loaded by Watch.
func TestEmptyDirectory(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		// Hidden files are not files of the configuration: the directory is
		// empty. (A README.md alone is an error: loadfs_dir_test.go.)
		if err := os.WriteFile(filepath.Join(dir, ".keep"), []byte("not a configuration"), 0o644); err != nil {
			t.Fatal(err)
		}
		cfg, err := Load(dir)
		if err != nil {
			t.Fatalf("Load(empty directory) = %v", err)
		}
		if len(cfg.Domains()) != 0 {
			t.Fatalf("domains %v, want none", cfg.Domains())
		}
		if w := warningLines(cfg); !strings.HasPrefix(w, dir+": warning: no *.yaml or *.yml files in the directory: no domain is configured") {
			t.Errorf("warnings %q", w)
		}
		e := newMemEngine(t, cfg, nil)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		reloaded := make(chan error, 1)
		go e.Watch(ctx, dir, 10*time.Millisecond, func(_ *Config, err error) { reloaded <- err })
		// Watch takes its baseline when it starts: wait until it waits for
		// its first poll (a 50 ms sleep in real time let a late start take
		// late.yaml into the baseline, never to be loaded).
		synctest.Wait()
		data := "domain: late\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1}\n"
		if err := os.WriteFile(filepath.Join(dir, "late.yaml"), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		// A poll may catch the file created but not yet written (an empty
		// file is an error, the old configuration stays); the next one loads
		// it.
		deadline := time.After(5 * time.Second)
		for loaded := false; !loaded; {
			select {
			case err := <-reloaded:
				loaded = err == nil
			case <-deadline:
				t.Fatal("the new file was not loaded")
			}
		}
		if e.Config().Domain("late") == nil {
			t.Fatal("domain late not in force after the reload")
		}
	})
}

// unit_multiplier (envoyproxy/ratelimit main): the period is unit ×
// unit_multiplier, windows aligned to the epoch as upstream's are.
func TestUnitMultiplier(t *testing.T) {
	cfg, err := Load("testdata/upstream/unit_multiplier.yaml")
	if err != nil {
		t.Fatal(err)
	}
	r := cfg.Match("test-domain", ent("key1", "v"))
	if r == nil || r.Params.Period != 5*time.Minute || r.Unit != "minute" || r.UnitMultiplier != 5 || r.Params.Limit != 20 {
		t.Fatalf("key1: %+v, want 20 per 5 minutes", r)
	}
	if r := cfg.Match("test-domain", ent("key2", "v")); r == nil || r.Params.Period != time.Minute || r.UnitMultiplier != 1 {
		t.Errorf("key2: %+v, want 25 per minute, multiplier 1", r)
	}
	// 20 per 5-minute window: refused at the 21st, admitted again when the
	// window turns at a multiple of 5 minutes since the epoch.
	now := time.Unix(1_800_000_000, 0) // a multiple of 300 s
	e := newMemEngine(t, cfg, func() time.Time { return now })
	decide := func() Response {
		t.Helper()
		resp, err := e.Decide(context.Background(), req("test-domain", ent("key1", "v")))
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	for range 20 {
		decide()
	}
	now = now.Add(4 * time.Minute)
	if resp := decide(); resp.Code != CodeOverLimit || resp.Statuses[0].Decision.RetryAfter != time.Minute {
		t.Fatalf("21st at 4m: %s retry %v, want OVER_LIMIT retry 1m", resp, resp.Statuses[0].Decision.RetryAfter)
	}
	now = now.Add(time.Minute)
	if resp := decide(); resp.Code != CodeOK {
		t.Fatalf("at 5m: %s, want OK", resp)
	}
}

// Wildcards anywhere in a value, as envoyproxy/ratelimit main matches them:
// each '*' matches any run of characters, none included; the literal parts
// appear in order; an exact value still wins, then the first wildcard in
// file order.
func TestWildcardsAnywhere(t *testing.T) {
	for _, tc := range []struct {
		pattern, value string
		want           bool
	}{
		{"foo*", "foo", true},
		{"foo*", "foobar", true},
		{"foo*", "fo", false},
		{"*", "", true},
		{"*", "anything", true},
		{"bar*b", "barb", true},
		{"bar*b", "bar-b", true},
		{"bar*b", "bar", false},
		{"bar*b", "barbx", false},
		{"bab*bab", "babab", false}, // the literal parts may not overlap
		{"bab*bab", "babbab", true},
		{"/api*v1", "/api/users/v1", true},
		{"/api*v1", "/api/v2", false},
		{"svc*ep*rpc", "svc.a.ep.b.rpc", true},
		{"svc*ep*rpc", "svcrpc", false},
		{"svc*ep*rpc", "svceprpc", true},
		{"svc*ep*rpc", "svc-rpc-ep", false},
		{"a**b", "ab", true},
		{"*.example.com", "api.example.com", true},
		{"*.example.com", "example.com", false},
		{"x*y*x", "xyx", true},
		{"x*y*x", "xyyx", true},
		{"x*y*x", "xy", false},
	} {
		n := &Node{Key: "k", Value: tc.pattern, pattern: strings.Split(tc.pattern, "*")}
		if got := n.MatchValue(tc.value); got != tc.want {
			t.Errorf("%q matches %q = %v, want %v", tc.pattern, tc.value, got, tc.want)
		}
	}

	cfg, err := Load("testdata/upstream/wildcard.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for value, want := range map[string]string{"barb": "midWild_bar*b", "bar_x_b": "midWild_bar*b", "bar": "", "bar*b": "midWild_bar*b"} {
		got := ""
		if r := cfg.Match("test-domain", ent("midWild", value)); r != nil {
			got = r.Path
		}
		if got != want {
			t.Errorf("midWild=%q matched %q, want %q", value, got, want)
		}
	}
}

// share_threshold takes any wildcard value, with '*' anywhere: every value
// the pattern matches shares one counter.
func TestShareThresholdMiddleWildcard(t *testing.T) {
	cfg, err := Load("testdata/upstream/share_threshold.yaml")
	if err != nil {
		t.Fatal(err)
	}
	e := newMemEngine(t, cfg, frozen(time.Unix(1_800_000_000, 0)))
	var last Response
	for i := range 50 {
		v := "svc" + strings.Repeat("x", i) + "ep" + strings.Repeat("y", i) + "rpc"
		if last, err = e.Decide(context.Background(), req("test-domain", ent("multiroute", v))); err != nil {
			t.Fatal(err)
		}
		if last.Code != CodeOK {
			t.Fatalf("request %d (%s): %s, want OK", i+1, v, last)
		}
	}
	last, err = e.Decide(context.Background(), req("test-domain", ent("multiroute", "svc-other-ep-rpc")))
	if err != nil {
		t.Fatal(err)
	}
	if last.Code != CodeOverLimit {
		t.Errorf("51st request of svc*ep*rpc (50 per minute, shared): %s, want OVER_LIMIT", last)
	}
}

// Descriptor metadata (envoyproxy/ratelimit main, for quota routing) is
// accepted with any content and changes no decision.
func TestMetadataIgnored(t *testing.T) {
	cfg, err := Load("testdata/upstream/metadata.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Warnings()) != 0 {
		t.Errorf("warnings:\n%s", warningLines(cfg))
	}
	if r := cfg.Match("test-domain", ent("key2", "x")); r == nil || r.Params.Limit != 20 || r.Shadow {
		t.Errorf("key2: %+v, want 20/minute, enforced", r)
	}
}

// A directory that loses every file on a reload (rm, then cp) keeps the
// rules in force and reports why; the files put back load as usual.
func TestEmptiedDirectoryKeepsTheRules(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		path := filepath.Join(dir, "rules.yaml")
		rules := func(n string) []byte {
			return []byte("domain: live\ndescriptors:\n  - key: k\n    rate_limit: {name: r, unit: minute, requests_per_unit: " + n + "}\n")
		}
		if err := os.WriteFile(path, rules("5"), 0o644); err != nil {
			t.Fatal(err)
		}
		cfg, err := Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		e := newMemEngine(t, cfg, nil)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		reports := make(chan error, 10)
		go e.Watch(ctx, dir, 100*time.Millisecond, func(_ *Config, err error) { reports <- err })
		synctest.Wait()

		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
		time.Sleep(150 * time.Millisecond)
		synctest.Wait()
		err = <-reports
		if err == nil || !strings.Contains(err.Error(), "the rules in force stay") {
			t.Fatalf("emptied directory reported %v, want the rules kept", err)
		}
		if e.Config().Domain("live") == nil {
			t.Fatal("the emptied directory lifted domain live")
		}
		if err := os.WriteFile(path, rules("7"), 0o644); err != nil {
			t.Fatal(err)
		}
		time.Sleep(150 * time.Millisecond)
		synctest.Wait()
		if err := <-reports; err != nil || e.EffectiveLimit("live", "r").Params().Limit != 7 {
			t.Fatalf("files put back: %v, want the new rules in force", err)
		}
	})
}
