package main

import (
	"bytes"
	"context"
	"runtime/debug"
	"strings"
	"testing"
)

func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}, {"-version"}} {
		var out, errb bytes.Buffer
		if code := run(context.Background(), args, &out, &errb); code != 0 {
			t.Fatalf("%q: exit %d, stderr %q", args, code, errb.String())
		}
		if !strings.HasPrefix(out.String(), "floodgate dev") || !strings.Contains(out.String(), "\ngo: go1.") {
			t.Fatalf("%q: output %q lacks version or go line", args, out.String())
		}
	}
}

func TestVersionString(t *testing.T) {
	bi := func(version string, settings ...string) *debug.BuildInfo {
		b := &debug.BuildInfo{Main: debug.Module{Path: "github.com/floodgate/floodgate", Version: version}}
		for i := 0; i < len(settings); i += 2 {
			b.Settings = append(b.Settings, debug.BuildSetting{Key: settings[i], Value: settings[i+1]})
		}
		return b
	}
	const rev = "a1b2c3d4e5f60718293a4b5c6d7e8f9012345678"
	for _, c := range []struct {
		name, ldflags string
		bi            *debug.BuildInfo
		want          string
	}{
		{"no build info", "dev", nil, "dev"},
		{"go run", "dev", bi("(devel)"), "dev"},
		{"vcs", "dev", bi("(devel)", "vcs.revision", rev, "vcs.modified", "false"), "dev (a1b2c3d)"},
		{"vcs modified", "dev", bi("(devel)", "vcs.revision", rev, "vcs.modified", "true"), "dev (a1b2c3d, modified)"},
		{"go install @tag", "dev", bi("v1.4.0"), "v1.4.0"},
		{"tagged checkout", "dev", bi("v1.4.0", "vcs.revision", rev, "vcs.modified", "false"), "v1.4.0 (a1b2c3d)"},
		{"pseudo-version names the revision", "dev", bi("v0.0.0-20260102150405-a1b2c3d4e5f6+dirty", "vcs.revision", rev, "vcs.modified", "true"),
			"v0.0.0-20260102150405-a1b2c3d4e5f6+dirty"},
		{"-ldflags wins", "v2.0.0", bi("v1.4.0", "vcs.revision", rev), "v2.0.0"},
	} {
		if got := versionString(c.ldflags, c.bi); got != c.want {
			t.Errorf("%s: versionString = %q, want %q", c.name, got, c.want)
		}
	}
}

// The -ldflags "-X main.version=..." mechanism still sets the first line.
func TestVersionLdflags(t *testing.T) {
	defer func(v string) { version = v }(version)
	version = "v9.9.9"
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"--version"}, &out, &errb); code != 0 || !strings.HasPrefix(out.String(), "floodgate v9.9.9\n") {
		t.Fatalf("exit %d, output %q; want floodgate v9.9.9", code, out.String())
	}
}

func TestUnknownCommand(t *testing.T) {
	for _, c := range []struct{ arg, hint string }{
		{"frobnicate", ""},
		{"serv", ` (did you mean "serve"?)`},
		{"valdiate", ` (did you mean "validate"?)`},
	} {
		var out, errb bytes.Buffer
		if code := run(context.Background(), []string{c.arg}, &out, &errb); code != 2 {
			t.Fatalf("%s: exit %d, want 2", c.arg, code)
		}
		if want := `unknown command "` + c.arg + `"` + c.hint + "\n"; !strings.Contains(errb.String(), want) || !strings.Contains(errb.String(), "version") {
			t.Errorf("stderr %q should say %q and list commands", errb.String(), want)
		}
	}
}

// Help asked for goes to stdout with exit 0 (so that `floodgate serve
// --help | less` works); usage shown for a mistake goes to stderr, exit 2.
func TestHelp(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--help"}, "usage: floodgate <command>"},
		{[]string{"-help"}, "usage: floodgate <command>"},
		{[]string{"-h"}, "usage: floodgate <command>"},
		{[]string{"help"}, "usage: floodgate <command>"},
		{[]string{"help", "help"}, "usage: floodgate <command>"},
		{[]string{"help", "serve"}, "usage: floodgate serve"},
		{[]string{"help", "sim"}, "usage: floodgate sim"},
		{[]string{"help", "version"}, "usage: floodgate version"},
		{[]string{"serve", "--help"}, "usage: floodgate serve"},
		{[]string{"serve", "-h"}, "usage: floodgate serve"},
		{[]string{"serve", "--store", "redis://x:1", "--help"}, "usage: floodgate serve"},
		{[]string{"bench", "--help"}, "usage: floodgate bench"},
		{[]string{"validate", "--help"}, "usage: floodgate validate"},
		{[]string{"validate", "-h"}, "usage: floodgate validate"},
		{[]string{"sim", "--help"}, "usage: floodgate sim"},
		{[]string{"sim", "--limit", "5", "-h"}, "usage: floodgate sim"},
		{[]string{"version", "--help"}, "usage: floodgate version"},
	}
	for _, c := range cases {
		var out, errb bytes.Buffer
		if code := run(context.Background(), c.args, &out, &errb); code != 0 {
			t.Errorf("%q: exit %d, want 0 (stderr %q)", c.args, code, errb.String())
		}
		if !strings.HasPrefix(out.String(), c.want) || errb.Len() != 0 {
			t.Errorf("%q: stdout %q, stderr %q; want the usage %q on stdout alone", c.args, out.String(), errb.String(), c.want)
		}
	}
	// (An unknown flag of serve, bench, validate or version gets a line
	// pointing to -h instead: TestUnknownFlagNoUsage.)
	for _, args := range [][]string{{}, {"help", "nope"}, {"validate"}, {"sim", "--nope"}} {
		var out, errb bytes.Buffer
		if code := run(context.Background(), args, &out, &errb); code != 2 {
			t.Errorf("%q: exit %d, want 2", args, code)
		}
		if out.Len() != 0 || !strings.Contains(errb.String(), "usage: floodgate") {
			t.Errorf("%q: stdout %q, stderr %q; want the usage on stderr alone", args, out.String(), errb.String())
		}
	}
}

// Every subcommand that parses flags answers a bad flag or a wrong
// argument count with exit 2 and what is wrong, and an unknown flag close
// to a defined one with a suggestion.
func TestSubcommandFlags(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"bench", "-nope"}, "floodgate bench: flag provided but not defined: -nope\n"},
		{[]string{"bench", "-x"}, "floodgate bench: flag provided but not defined: -x\n"},
		{[]string{"bench", "-conn", "2"}, "floodgate bench: flag provided but not defined: -conn (did you mean --conns?)\n"},
		{[]string{"bench", "-nn", "2"}, "floodgate bench: flag provided but not defined: -nn (did you mean -n?)\n"},
		{[]string{"bench", "--domian", "x"}, "(did you mean --domain?)\n"},
		{[]string{"serve", "--stor", "x"}, "floodgate serve: flag provided but not defined: -stor (did you mean --store?)\n"},
		{[]string{"serve", "--stroe=x"}, "(did you mean --store?)\n"},
		{[]string{"serve", "--reload", "1s"}, "(did you mean --reload-interval?)\n"},
		{[]string{"serve", "--adminn-token", "t"}, "(did you mean --admin-token?)\n"},
		{[]string{"serve", "--colour"}, "floodgate serve: flag provided but not defined: -colour\n"},
		{[]string{"validate", "-vv", "x.yaml"}, "floodgate validate: flag provided but not defined: -vv (did you mean -v?)\n"},
		{[]string{"version", "--verbose"}, "floodgate version: flag provided but not defined: -verbose\n"},
		{[]string{"bench", "extra"}, `floodgate bench: unexpected argument "extra"`},
		{[]string{"version", "extra"}, `floodgate version: unexpected argument "extra"`},
		{[]string{"validate"}, "floodgate validate: missing argument\nusage: floodgate validate"},
		// The shell's list of a directory's files: give the directory.
		{[]string{"validate", "rules/a.yaml", "rules/b.yaml", "rules/c.yaml"}, "floodgate validate: unexpected argument \"rules/b.yaml\": validate takes one PATH; to check several files, give their directory: its .yaml files are checked together, as serve --config loads them\nusage: floodgate validate"},
		{[]string{"validate", "a.yaml", "b.yaml"}, "floodgate validate: unexpected argument \"b.yaml\": validate takes one PATH; to check several files, give their directory: its .yaml files are checked together, as serve --config loads them\nusage: floodgate validate"},
		{[]string{"validate", "a.yaml", "-v"}, "floodgate validate: \"-v\" after \"a.yaml\": flags go before the arguments\nusage: floodgate validate"},
		// After "--" an argument that starts with '-' is one, as meant.
		{[]string{"validate", "--", "a.yaml", "-v"}, "floodgate validate: unexpected argument \"-v\": validate takes one PATH; to check several files, give their directory: its .yaml files are checked together, as serve --config loads them\nusage: floodgate validate"},
		{[]string{"validate", "-v", "--", "a.yaml", "-v"}, "floodgate validate: unexpected argument \"-v\": validate takes one PATH; to check several files, give their directory: its .yaml files are checked together, as serve --config loads them\nusage: floodgate validate"},
		{[]string{"validate", "a.yaml", "--"}, "floodgate validate: unexpected argument \"--\": validate takes one PATH; to check several files, give their directory: its .yaml files are checked together, as serve --config loads them\nusage: floodgate validate"},
		// -h after a bad value, which the flag package never reaches: the
		// usage asked for follows the error.
		{[]string{"serve", "--store-timeout", "x", "-h"}, "floodgate serve: invalid value \"x\" for flag -store-timeout: parse error; want a duration such as 500ms, 5s or 1m30s (the unit is required)\nusage: floodgate serve"},
	}
	for _, c := range cases {
		var out, errb bytes.Buffer
		if code := run(context.Background(), c.args, &out, &errb); code != 2 {
			t.Errorf("%q: exit %d, want 2 (stderr %q)", c.args, code, errb.String())
		}
		if !strings.Contains(errb.String(), c.want) {
			t.Errorf("%q: stderr %q lacks %q", c.args, errb.String(), c.want)
		}
	}
}

// A bad value for a flag that exists is one line, without the usage that
// would scroll it away (serve's is 80 lines).
func TestBadFlagValueOneLine(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--grpc-max-connection-idle=abc"}, `floodgate serve: invalid value "abc" for flag -grpc-max-connection-idle: parse error; want a duration such as 500ms, 5s or 1m30s (the unit is required) (floodgate serve -h lists the flags)` + "\n"},
		{[]string{"bench", "-n", "x"}, `floodgate bench: invalid value "x" for flag -n: parse error; want an integer, e.g. 0 (floodgate bench -h lists the flags)` + "\n"},
		{[]string{"validate", "-v=maybe", "a.yaml"}, `floodgate validate: invalid boolean value "maybe" for -v: parse error; want true or false (also 1, 0, t, f) (floodgate validate -h lists the flags)` + "\n"},
		// A flag given no value is the same mistake.
		{[]string{"serve", "--config"}, "floodgate serve: flag needs an argument: -config (floodgate serve -h lists the flags)\n"},
		// sim parses its own flags and says it the same way.
		{[]string{"sim", "--limit", "x"}, `floodgate sim: invalid value "x" for flag -limit: parse error (floodgate sim -h lists the flags)` + "\n"},
		{[]string{"sim", "--scale", "soon"}, `floodgate sim: invalid value "soon" for flag -scale: want AT:K, e.g. 30s:8, got "soon" (floodgate sim -h lists the flags)` + "\n"},
		{[]string{"sim", "--duration"}, "floodgate sim: flag needs an argument: -duration (floodgate sim -h lists the flags)\n"},
	} {
		var out, errb bytes.Buffer
		if code := run(context.Background(), c.args, &out, &errb); code != 2 || errb.String() != c.want {
			t.Errorf("%q: exit %d, stderr %q; want exit 2 and %q", c.args, code, errb.String(), c.want)
		}
	}
}

func TestBenchBadFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"bench", "-n", "-5"}, "floodgate bench: -n -5: must be >= 0 (0: no count bound)\n"},
		{[]string{"bench", "-d", "-1s"}, "floodgate bench: -d -1s: must be >= 0 (0: no time bound)\n"},
		{[]string{"bench", "-d", "0"}, "floodgate bench: -n 0 -d 0: set -n, -d or both, a run must be bounded\n"},
		{[]string{"bench", "-p", "carrier"}, "floodgate bench: -p carrier: want grpc, json, v1 or http\n"},
		{[]string{"bench", "-c", "20000"}, "floodgate bench: -c 20000: must be 1 to 10000\n"},
		{[]string{"bench", "-n", "-5", "-d", "-1s"}, "floodgate bench: -n -5: must be >= 0 (0: no count bound)\n-d -1s: must be >= 0 (0: no time bound)\n"},
	} {
		var out, errb bytes.Buffer
		if code := run(context.Background(), c.args, &out, &errb); code != 2 || errb.String() != c.want {
			t.Errorf("%q: exit %d, stderr %q; want exit 2 and %q", c.args, code, errb.String(), c.want)
		}
	}
}

// Values that bench used to replace with its defaults silently are errors
// that name the flag, the value and what is allowed. The run is bounded
// and aimed at a closed port, so that a value let through fails fast.
func TestBenchRejectsDefaultedValues(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-c", "0"}, "floodgate bench: -c 0: must be 1 to 10000\n"},
		{[]string{"-c", "-5"}, "floodgate bench: -c -5: must be 1 to 10000\n"},
		{[]string{"-keys", "-3"}, "floodgate bench: -keys -3: must be >= 1\n"},
		{[]string{"-keys", "0"}, "floodgate bench: -keys 0: must be >= 1\n"},
		{[]string{"-hits", "-1"}, "floodgate bench: -hits -1: must be 1 to 4294967295\n"},
		{[]string{"-hits", "0"}, "floodgate bench: -hits 0: must be 1 to 4294967295\n"},
		{[]string{"-hits", "4294967296"}, "floodgate bench: -hits 4294967296: must be 1 to 4294967295\n"},
		{[]string{"-conns", "-2"}, "floodgate bench: -conns -2: must be 0 (default: min(c, 4)) or 1 to 16 (-c)\n"},
		{[]string{"-c", "2", "-conns", "3"}, "floodgate bench: -conns 3: must be 0 (default: min(c, 4)) or 1 to 2 (-c)\n"},
		{[]string{"-timeout", "0s"}, "floodgate bench: -timeout 0s: must be > 0\n"},
		{[]string{"-timeout", "-1s"}, "floodgate bench: -timeout -1s: must be > 0\n"},
		{[]string{"-domain", ""}, "floodgate bench: -domain \"\": must not be empty\n"},
		{[]string{"-D", "noequals"}, "floodgate bench: -D noequals: entry \"noequals\" is not key=value (want key=value,key2=value2, each key non-empty)\n"},
		{[]string{"-D", "a=1,=2"}, "floodgate bench: -D a=1,=2: entry \"=2\" has an empty key (want key=value,key2=value2, each key non-empty)\n"},
		{[]string{"-D", ""}, "floodgate bench: -D \"\": entry \"\" is not key=value (want key=value,key2=value2, each key non-empty)\n"},
		{[]string{"-D", "a=1", "-D", "b", "-c", "0"}, "floodgate bench: -D b: entry \"b\" is not key=value (want key=value,key2=value2, each key non-empty)\n-c 0: must be 1 to 10000\n"},
	} {
		args := append([]string{"bench", "-q", "-n", "1", "-addr", "127.0.0.1:9"}, c.args...)
		var out, errb bytes.Buffer
		if code := run(context.Background(), args, &out, &errb); code != 2 || errb.String() != c.want {
			t.Errorf("%q: exit %d, stderr %q; want exit 2 and %q", c.args, code, errb.String(), c.want)
		}
	}
}
