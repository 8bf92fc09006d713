package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
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
		// Outputs that cannot be written, seen before the run.
		{with("--out", filepath.Join(file, "report")), 2, "--out " + filepath.Join(file, "report") + ": " + file + " is not a folder"},
		{with("--csv", filepath.Join(dir, "no", "such", "dir", "x.csv")), 2, "the folder " + filepath.Join(dir, "no", "such", "dir") + " does not exist"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), append([]string{"sim", "--progress", "never"}, tc.args...), &stdout, &stderr)
		if code != tc.code || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("floodgate sim %q: exit %d, stderr %q; want exit %d and %q", tc.args, code, stderr.String(), tc.code, tc.want)
		}
	}
}

// cancelAfterErrs is a context whose Err is nil for its first n calls and
// context.Canceled after: sim checks its context before each chunk of
// 8192 requests, so the run is interrupted at a known point, without
// timing.
type cancelAfterErrs struct {
	context.Context
	n atomic.Int64
}

func (c *cancelAfterErrs) Err() error {
	if c.n.Add(-1) < 0 {
		return context.Canceled
	}
	return nil
}

// An interrupted `floodgate sim` says so, as floodgate bench does, with
// how far the run got, writes nothing and exits 130 as bench does (it
// printed "floodgate sim: context canceled" and exited 1).
func TestSimInterrupted(t *testing.T) {
	dir := t.TempDir()
	// 60,000 steady requests, 100 a second: two chunks of 8192 are fed
	// before the third check of the context ends the run, the last of
	// them (request 16,383) at 163.83 s.
	args := []string{"sim", "--progress", "never", "--limit", "5", "--period", "1s", "--duration", "10m",
		"--traffic", "steady", "--rate", "100", "--contender", "fixed_window", "--csv", filepath.Join(dir, "x.csv")}
	ctx := &cancelAfterErrs{Context: context.Background()}
	ctx.n.Store(2)
	var stdout, stderr bytes.Buffer
	code := run(ctx, args, &stdout, &stderr)
	said := regexp.MustCompile(`^floodgate sim: interrupted after \d+\.\d\ds, at 2m43\.83s of 10m simulated \(16384 requests\); nothing written\n$`)
	if code != 130 || stdout.Len() != 0 || !said.MatchString(stderr.String()) {
		t.Errorf("interrupted sim: exit %d, stdout %q, stderr %q; want exit 130, no stdout, and stderr matching %s", code, stdout.String(), stderr.String(), said)
	}
	if _, err := os.Stat(filepath.Join(dir, "x.csv")); !os.IsNotExist(err) {
		t.Errorf("interrupted sim wrote its --csv (stat: %v)", err)
	}
	// Interrupted before the first request.
	ctx.n.Store(0)
	stdout.Reset()
	stderr.Reset()
	code = run(ctx, args, &stdout, &stderr)
	if want := "at 0s of 10m simulated (0 requests); nothing written\n"; code != 130 || !strings.HasSuffix(stderr.String(), want) {
		t.Errorf("sim interrupted at once: exit %d, stderr %q; want exit 130 and %q", code, stderr.String(), want)
	}
	// Interrupted while reading a replay log, before the run: the log is
	// named (a log of millions of lines takes seconds to read).
	log := filepath.Join(dir, "access.log")
	if err := os.WriteFile(log, []byte("0 a\n0.5 b\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx.n.Store(0)
	stderr.Reset()
	code = run(ctx, []string{"sim", "--progress", "never", "--replay", log, "--limit", "5", "--period", "1s"}, &stdout, &stderr)
	if want := ", while reading the replay log " + log + ", before the run; nothing written\n"; code != 130 || !strings.HasPrefix(stderr.String(), "floodgate sim: interrupted after ") || !strings.HasSuffix(stderr.String(), want) {
		t.Errorf("sim --replay interrupted while reading: exit %d, stderr %q; want exit 130 and %q", code, stderr.String(), want)
	}
	// Poisson arrivals fall on any µs: the point reached is told to the ms.
	ctx.n.Store(1)
	stderr.Reset()
	code = run(ctx, append(args, "--traffic", "poisson"), &stdout, &stderr)
	ms := regexp.MustCompile(`, at 1m2\d\.\d{1,3}s of 10m simulated \(8192 requests\); nothing written\n$`)
	if code != 130 || !ms.MatchString(stderr.String()) {
		t.Errorf("sim interrupted (poisson): exit %d, stderr %q; want exit 130 and %s", code, stderr.String(), ms)
	}
}
