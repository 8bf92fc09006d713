package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
)

// TestValidateErrorsAndWarnings: a file with one problem and one warning
// gets both on stderr, the problem first, each at its line, and exit 1: the
// warnings used to be dropped whenever the file also had a problem.
func TestValidateErrorsAndWarnings(t *testing.T) {
	f := filepath.Join(t.TempDir(), "rl.yaml")
	data := "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: -5\n      shadow_mode: true\n"
	if err := os.WriteFile(f, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"validate", f}, &out, &errb)
	want := f + ":6: requests_per_unit must be >= 0, got -5\n" +
		f + `:7: warning: field "shadow_mode" is ignored in rate_limit, as envoyproxy/ratelimit ignores it there: this rule is enforced, not shadowed; set shadow_mode on the descriptor to shadow it` + "\n"
	if code != 1 || errb.String() != want || out.Len() != 0 {
		t.Fatalf("exit %d, stdout %q, stderr:\n%s\nwant exit 1 and stderr:\n%s", code, out.String(), errb.String(), want)
	}
}
