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
