package main

import (
	"github.com/floodgate/floodgate/policy"
	"os"
	"testing"
)

func TestDefaultConfigIsTheExample(t *testing.T) {
	want, err := policy.Load("../../examples/config")
	if err != nil {
		t.Fatal(err)
	}
	t.Chdir(t.TempDir())
	if _, err := os.Stat(exampleConfig); err == nil {
		t.Fatal("temp dir has examples/config")
	}
	got, path, err := (&serveFlags{}).loadConfig(policy.Load)
	if err != nil {
		t.Fatalf("loadConfig outside the repository: %v", err)
	}
	if path != "" {
		t.Errorf("watch path = %q, want none for the built-in copy", path)
	}
	if g, w := got.Dump(), want.Dump(); g != w {
		t.Errorf("built-in config differs from examples/config:\n--- built-in\n%s\n--- examples/config\n%s", g, w)
	}
}
