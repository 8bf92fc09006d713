package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestVersion(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"version"}, &out, &errb); code != 0 {
		t.Fatalf("version exit %d, stderr %q", code, errb.String())
	}
	if !strings.HasPrefix(out.String(), "floodgate dev\n") || !strings.Contains(out.String(), "go: go1.") {
		t.Fatalf("version output %q lacks version or go line", out.String())
	}
}

func TestUnknownCommand(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"frobnicate"}, &out, &errb); code != 2 {
		t.Fatalf("exit %d, want 2", code)
	}
	if !strings.Contains(errb.String(), `unknown command "frobnicate"`) || !strings.Contains(errb.String(), "version") {
		t.Fatalf("stderr %q should name the bad command and list commands", errb.String())
	}
}

// Every subcommand that parses flags answers -h with its usage and exit 0,
// a bad flag or a wrong argument count with exit 2 and what is wrong.
func TestSubcommandFlags(t *testing.T) {
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"serve", "-h"}, 0, "usage: floodgate serve"},
		{[]string{"bench", "-h"}, 0, "usage: floodgate bench"},
		{[]string{"validate", "-h"}, 0, "usage: floodgate validate"},
		{[]string{"bench", "-nope"}, 2, "flag provided but not defined: -nope"},
		{[]string{"bench", "extra"}, 2, `floodgate bench: unexpected argument "extra"`},
		{[]string{"validate"}, 2, "usage: floodgate validate"},
		{[]string{"validate", "a.yaml", "b.yaml"}, 2, "usage: floodgate validate"},
	}
	for _, c := range cases {
		var out, errb bytes.Buffer
		if code := run(context.Background(), c.args, &out, &errb); code != c.code {
			t.Errorf("%q: exit %d, want %d (stderr %q)", c.args, code, c.code, errb.String())
		}
		if !strings.Contains(errb.String(), c.want) {
			t.Errorf("%q: stderr %q lacks %q", c.args, errb.String(), c.want)
		}
	}
}
