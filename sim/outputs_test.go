package sim

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// An --out or --csv that cannot be written is refused before the run, with
// the flag named and nothing simulated (the run can take minutes); one
// that can is written.
func TestOutputsCheckedBeforeTheRun(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "afile")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--out", file}, "--out " + file + ": not a folder"},
		{[]string{"--out", filepath.Join(file, "x")}, "--out " + filepath.Join(file, "x") + ": " + file + " is not a folder"},
		{[]string{"--csv", filepath.Join(dir, "missing", "x.csv")}, "the folder " + filepath.Join(dir, "missing") + " does not exist"},
		{[]string{"--csv", dir}, "--csv " + dir + ": a folder, want a file name"},
	} {
		code, stdout, stderr := mainRun(t, append([]string{"--scenario", "article"}, c.args...)...)
		if code != 2 || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", c.args, code, stderr, c.want)
		}
		if stdout != "" || strings.Contains(stderr, "simulated") {
			t.Errorf("%v: the run went ahead (stdout %q, stderr %q)", c.args, stdout, stderr)
		}
	}
	out, csv := filepath.Join(dir, "new", "report"), filepath.Join(dir, "series.csv")
	if code, _, stderr := mainRun(t, "--scenario", "article", "--out", out, "--csv", csv); code != 0 {
		t.Fatalf("--out %s --csv %s: exit %d: %s", out, csv, code, stderr)
	}
	for _, p := range []string{filepath.Join(out, "index.html"), csv} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("not written: %v", err)
		}
	}
}
