package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"validate", "../../policy/testdata/good/saas.yaml"}, &out, &errb); code != 0 {
		t.Fatalf("valid config: exit %d, stderr %q", code, errb.String())
	}
	if !strings.Contains(out.String(), "valid (1 domain, 6 rules)") {
		t.Fatalf("stdout %q", out.String())
	}
	one := filepath.Join(t.TempDir(), "one.yaml")
	if err := os.WriteFile(one, []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if code := run(context.Background(), []string{"validate", one}, &out, &errb); code != 0 || out.String() != one+": valid (1 domain, 1 rule)\n" {
		t.Fatalf("one rule: exit %d, stdout %q, stderr %q", code, out.String(), errb.String())
	}
	out.Reset()
	if code := run(context.Background(), []string{"validate", "../../examples/config"}, &out, &errb); code != 0 || !strings.Contains(out.String(), " domains, ") {
		t.Fatalf("examples: exit %d, stdout %q, stderr %q", code, out.String(), errb.String())
	}
	out.Reset()
	errb.Reset()
	if code := run(context.Background(), []string{"validate", "../../policy/testdata/bad/negative_rate.yaml"}, &out, &errb); code != 1 {
		t.Fatalf("bad config: exit %d, want 1", code)
	}
	want := "../../policy/testdata/bad/negative_rate.yaml:4: requests_per_unit must be >= 0, got -5\n"
	if lines := strings.Split(errb.String(), "\n"); len(lines) != 4 || lines[0]+"\n" != want {
		t.Fatalf("stderr %q, want three file:line problems starting with %q", errb.String(), want)
	}
	if code := run(context.Background(), []string{"validate"}, &out, &errb); code != 2 {
		t.Fatalf("no path: exit %d, want 2", code)
	}
}

// A domain declared twice is one problem among others: validate still
// prints the problems of the file's rules (the loader checks only the
// rules of the first declaration), each with its file and line.
func TestValidateDirectoryPrintsEveryProblem(t *testing.T) {
	dir := t.TempDir()
	for name, data := range map[string]string{
		"a.yaml": "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
		"b.yaml": "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 10, ceil: 20}\n" +
			"  - key: r\n    rate_limit: {unit: second, requests_per_unit: -1, replaces: [{name: nope}]}\n",
		"c.yaml": "domain: e\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 10, ceil: 20}\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	a, b, c := filepath.Join(dir, "a.yaml"), filepath.Join(dir, "b.yaml"), filepath.Join(dir, "c.yaml")
	ceil := ": ceil lets a rule borrow from its parent, and this one has none: set hierarchy: true and give an enclosing descriptor (or the domain) a rate_limit\n"
	want := b + `:1: duplicate domain "d" (first declared at ` + a + ":1)\n" +
		b + ":4" + ceil +
		b + ":6: requests_per_unit must be >= 0, got -1\n" +
		b + `:6: replaces "nope": no rate_limit in domain "d" has that name` + "\n" +
		c + ":4" + ceil
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"validate", dir}, &out, &errb); code != 1 || errb.String() != want || out.Len() != 0 {
		t.Fatalf("exit %d, stdout %q, stderr\n%s\nwant exit 1 and\n%s", code, out.String(), errb.String(), want)
	}
}

// A file envoyproxy/ratelimit loads is valid: what it ignores is ignored
// here too, each with a warning on stderr at its line; an empty directory
// is valid (no domains) with a warning.
func TestValidateWarnings(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "rl.yaml")
	data := "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 5\n      shadow_mode: true\n---\n"
	if err := os.WriteFile(f, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"validate", f}, &out, &errb); code != 0 {
		t.Fatalf("exit %d, stderr %q", code, errb.String())
	}
	want := f + `:7: warning: field "shadow_mode" is ignored in rate_limit, as envoyproxy/ratelimit ignores it there: this rule is enforced, not shadowed; set shadow_mode on the descriptor to shadow it` + "\n"
	if errb.String() != want || out.String() != f+": valid (1 domain, 1 rule)\n" {
		t.Fatalf("stdout %q\nstderr %q\nwant stderr %q", out.String(), errb.String(), want)
	}

	empty := t.TempDir()
	out.Reset()
	errb.Reset()
	if code := run(context.Background(), []string{"validate", empty}, &out, &errb); code != 0 || out.String() != empty+": valid (0 domains, 0 rules)\n" {
		t.Fatalf("empty directory: exit %d, stdout %q, stderr %q", code, out.String(), errb.String())
	}
	if !strings.HasPrefix(errb.String(), empty+": warning: no *.yaml or *.yml files in the directory") {
		t.Fatalf("empty directory: stderr %q", errb.String())
	}
}

// Settings that contradict each other: one that can never do anything is a
// problem at its line (exit 1), one that loads but is likely a mistake a
// warning (exit 0).
func TestValidateContradictions(t *testing.T) {
	dir := t.TempDir()
	deny := filepath.Join(dir, "deny.yaml")
	shadow := filepath.Join(dir, "shadow.yaml")
	for name, data := range map[string]string{
		deny:   "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 0, strategy: wait, max_wait: 1s}\n",
		shadow: "domain: d\ndescriptors:\n  - key: k\n    shadow_mode: true\n    rate_limit: {algorithm: gcra, unit: second, requests_per_unit: 10, strategy: wait, max_wait: 2s}\n",
	} {
		if err := os.WriteFile(name, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var out, errb bytes.Buffer
	want := deny + ":4: requests_per_unit 0 blocks every request; strategy wait (max_wait 1s) does not apply: no wait ever admits a request (use reject, the default, or degrade)\n"
	if code := run(context.Background(), []string{"validate", "-v", deny}, &out, &errb); code != 1 || errb.String() != want || out.Len() != 0 {
		t.Fatalf("deny with wait: exit %d, stdout %q, stderr %q; want exit 1 and %q", code, out.String(), errb.String(), want)
	}
	out.Reset()
	errb.Reset()
	if code := run(context.Background(), []string{"validate", "-v", shadow}, &out, &errb); code != 0 {
		t.Fatalf("shadow with wait: exit %d, stderr %q", code, errb.String())
	}
	if !strings.HasPrefix(errb.String(), shadow+":5: warning: strategy wait does nothing while the descriptor's shadow_mode is on") {
		t.Errorf("shadow with wait: stderr %q, want the warning at line 5", errb.String())
	}
	if !strings.Contains(out.String(), "strategy=wait max_wait=2s") {
		t.Errorf("shadow with wait: stdout %q, want the rule with its max_wait", out.String())
	}
}
