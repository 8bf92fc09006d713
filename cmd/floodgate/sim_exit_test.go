package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// `floodgate sim` exits 2 for every mistake in its flags or its scenario,
// whichever check finds it (the flag parser, the flags' own checks, the
// scenario's validation, the replay log), 1 when a valid run fails (its
// output cannot be written), 0 otherwise: as its usage says.
func TestSimExitCodes(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	badYAML := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(badYAML, []byte("limit: 5\nperiod: 1s\nduration: 3s\ntraffic: [{kind: diurnal, rate: 5}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	badLog := filepath.Join(dir, "bad.log")
	if err := os.WriteFile(badLog, []byte("1 a\n0 b\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	run1 := []string{"--limit", "5", "--period", "1s", "--duration", "2s", "--rate", "10", "--contender", "gcra"}
	with := func(extra ...string) []string { return append(append([]string{}, run1...), extra...) }
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{with(), 0, ""},
		{with("--keys", "0"), 2, "--keys: must be between 1"},
		{with("--instances", "0"), 2, "--instances: must be between 1"},
		{with("--cost", "0"), 2, "--cost: must be between 1"},
		{with("--progress", "bogus"), 2, "--progress: want auto, always or never"},
		{with("--bin", "0s"), 2, "--bin: must be > 0"},
		{with("--seed", "-1"), 2, "--seed: want a non-negative integer"},
		{with("--contender", "local lag=1s"), 2, `--contender #2 "local lag=1s": lag: lag applies to the async strategy only`},
		{with("--contender", "bogus"), 2, `--contender #2 "bogus": algorithm: invalid limit: unknown algorithm "bogus"`},
		{with("--contender", "gcra bogus=1"), 2, `unknown field "bogus"`},
		{with("--scale", "bogus"), 2, "want AT:K"},
		{with("--scale", "1s:0"), 2, `--scale #1 "1s:0": instances: must be between 1`},
		{with("--traffic", "flash", "--peak", "50", "--at", "1s"), 2, "--rise, --hold or --decay is required"},
		{with("--traffic", "diurnal"), 2, "--peak is required"},
		{with("--nope"), 2, "flag provided but not defined: -nope"},
		{with("stray"), 2, `unexpected argument "stray"`},
		{[]string{"--period", "1s", "--duration", "2s", "--rate", "10"}, 2, "--limit is required"},
		{[]string{"--limit", "5", "--duration", "2s", "--rate", "10"}, 2, "--period is required"},
		{[]string{"--limit", "5", "--period", "1s", "--duration", "2s"}, 2, "--rate is required (the default traffic is poisson"},
		{[]string{"--limit", "5", "--period", "1s", "--rate", "10"}, 2, "--duration is required"},
		{[]string{"--scenario", "nope"}, 2, "not a file, nor a built-in scenario"},
		{[]string{"--scenario", badYAML}, 2, "bad.yaml:4: traffic[0] (diurnal): peak: required"},
		{[]string{"--scenario", "article", "--rate", "5"}, 2, "--rate describes traffic"},
		{[]string{"--replay", badLog, "--limit", "5", "--period", "1s"}, 2, "bad.log:2: time goes backwards"},
		{[]string{"--replay", filepath.Join(dir, "missing.log"), "--limit", "5", "--period", "1s"}, 2, "--replay: open"},
		// Valid runs whose output cannot be written.
		{with("--out", filepath.Join(file, "report")), 1, "not a directory"},
		{with("--csv", filepath.Join(dir, "no", "such", "dir", "x.csv")), 1, "no such file or directory"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), append([]string{"sim", "--progress", "never"}, tc.args...), &stdout, &stderr)
		if code != tc.code || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("floodgate sim %q: exit %d, stderr %q; want exit %d and %q", tc.args, code, stderr.String(), tc.code, tc.want)
		}
	}
}
