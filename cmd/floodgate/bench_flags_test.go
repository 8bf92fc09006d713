package main

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"
)

// -keys over 1 with {i} nowhere it is replaced is refused, naming the
// flags: every request would have used one key while the report said N.
func TestBenchKeysWithoutIndex(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string // "" for a run that is not refused
	}{
		{[]string{"-keys", "100"}, "floodgate bench: -keys 100: no -D value has {i}, so every request would use the same key; put {i} in a -D value (e.g. -D 'remote_address=10.0.0.{i}') or drop -keys\n"},
		{[]string{"-keys", "100", "-D", "user=x", "-D", "path=/{x}"}, "floodgate bench: -keys 100: no -D value has {i}"},
		{[]string{"-p", "http", "-addr", "http://127.0.0.1:9/x", "-keys", "3", "-H", "X-Key: k"}, "floodgate bench: -keys 3: neither -addr nor any -H value has {i}, so every request would be the same"},
		{[]string{"-keys", "100", "-D", "user=x", "-D", "ip=10.0.0.{i}"}, ""},
		{[]string{"-p", "http", "-addr", "http://127.0.0.1:9/x", "-keys", "3", "-H", "X-Key: k{i}"}, ""},
		{[]string{"-p", "http", "-addr", "http://127.0.0.1:9/x?id={i}", "-keys", "3"}, ""},
		{[]string{"-keys", "1", "-D", "user=x"}, ""},
	} {
		args := append([]string{"bench", "-q", "-n", "1", "-addr", "127.0.0.1:9"}, c.args...)
		var out, errb bytes.Buffer
		code := run(context.Background(), args, &out, &errb)
		if c.want == "" {
			if code == 2 {
				t.Errorf("%q: exit 2, stderr %q; want the run (aimed at a closed port)", c.args, errb.String())
			}
			continue
		}
		if code != 2 || !strings.HasPrefix(errb.String(), c.want) || out.Len() != 0 {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 2 and %q", c.args, code, out.String(), errb.String(), c.want)
		}
	}
}

// The help's examples for the example configuration match its rules: run
// against `floodgate serve` with its defaults, none is "no rule matched",
// and the logins one admits its 5 a minute for each of its 10 addresses.
func TestBenchHelpExamplesMatchExampleConfig(t *testing.T) {
	var help, errb bytes.Buffer
	if code := run(context.Background(), []string{"bench", "-h"}, &help, &errb); code != 0 {
		t.Fatalf("bench -h: exit %d %s", code, errb.String())
	}
	text, _, _ := strings.Cut(help.String(), "against the gateway")
	var examples [][]string
	for _, line := range strings.Split(text, "\n") {
		if rest, ok := strings.CutPrefix(line, "  floodgate bench "); ok {
			examples = append(examples, strings.Fields(strings.ReplaceAll(rest, "'", "")))
		}
	}
	if len(examples) < 2 {
		t.Fatalf("%d examples in the help:\n%s", len(examples), help.String())
	}
	out, serr, stop := startServe(t, "--reload-interval", "0")
	defer func() {
		if code := stop(); code != 0 {
			t.Errorf("serve exit %d after cancel: %s", code, serr.String())
		}
	}()
	httpAddr, grpcAddr, _ := serveAddrs(t, out.String())
	for _, ex := range examples {
		args := append([]string{"bench", "-q"}, ex...)
		addr := httpAddr
		for i, a := range ex {
			if a == "-n" {
				args[i+3] = "2000" // a bounded share of it
			}
			if a == "-p" && ex[i+1] == "grpc" {
				addr = grpcAddr
			}
		}
		args = append(args, "-addr", addr)
		var bout, berr bytes.Buffer
		code := run(context.Background(), args, &bout, &berr)
		report := bout.String()
		if code != 0 || strings.Contains(report, "note:") || !strings.Contains(report, "errors      0 ") {
			t.Errorf("%q: exit %d, stderr %s; want limiting by a rule, no note, no errors:\n%s", ex, code, berr.String(), report)
		}
		if strings.Contains(strings.Join(ex, " "), "login=") && !regexp.MustCompile(`admitted    50 \(`).MatchString(report) {
			t.Errorf("%q: want 50 admitted (10 addresses × 5 a minute):\n%s", ex, report)
		}
	}
}

// -conns' default depends on the protocol, and its error says the one
// that applies.
func TestBenchConnsDefaultNamed(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-conns", "-2"}, "floodgate bench: -conns -2: must be 0 (default: min(c, 4)) or 1 to 16 (-c)\n"},
		{[]string{"-p", "json", "-conns", "-2"}, "floodgate bench: -conns -2: must be 0 (default: c) or 1 to 16 (-c)\n"},
		{[]string{"-p", "http", "-c", "2", "-conns", "3"}, "floodgate bench: -conns 3: must be 0 (default: c) or 1 to 2 (-c)\n"},
	} {
		var out, errb bytes.Buffer
		code := run(context.Background(), append([]string{"bench", "-q", "-n", "1", "-addr", "127.0.0.1:9"}, c.args...), &out, &errb)
		if code != 2 || errb.String() != c.want {
			t.Errorf("%q: exit %d, stderr %q; want exit 2 and %q", c.args, code, errb.String(), c.want)
		}
	}
}
