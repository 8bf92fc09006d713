package sim

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// errCounter is a context whose Err is nil for its first n calls and
// context.Canceled after, and counts the calls: Run checks its context
// before each chunk of requests, so a run is interrupted at a known point,
// without timing.
type errCounter struct {
	context.Context
	n, calls atomic.Int64
}

func (c *errCounter) Err() error {
	c.calls.Add(1)
	if c.n.Add(-1) < 0 {
		return context.Canceled
	}
	return nil
}

// A run interrupted in the second pass of --out (the one that follows each
// contender's worst key) says so, prints the whole run's table (the run
// was complete), writes no report and exits 130; Run's error is an
// *InterruptedError with Worst and the Result set that wraps ctx's error.
func TestInterruptedInWorstKeyPass(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "report")
	// 12,000 requests over four keys, 100 a second under 5 a second each:
	// two chunks, two checks of the context in the run itself. The fixed
	// window takes a key other than the focus key 0 furthest over the
	// limit (seed 1; checked first), so --out runs a second pass.
	args := []string{"--progress", "never", "--limit", "5", "--period", "1s", "--duration", "2m",
		"--traffic", "poisson", "--rate", "100", "--keys", "4", "--contender", "fixed_window"}
	sc := &Scenario{Name: "t", Seed: 1, Limit: 5, Period: Duration(time.Second), Duration: Duration(2 * time.Minute),
		Traffic: []Source{{Kind: SourcePoisson, Rate: 100, Keys: 4}}, Contenders: []Contender{{Algorithm: "fixed_window"}}}
	res, err := Run(context.Background(), sc, WithWorstKeyWindows())
	if err != nil {
		t.Fatal(err)
	}
	if w := res.Contenders[0].Worst; w == nil || w.Key == sc.FocusKey {
		t.Fatalf("worst key window %+v: want one of a key other than the focus key %d, for the second pass to run", w, sc.FocusKey)
	}

	ctx := &errCounter{Context: context.Background()}
	ctx.n.Store(2)
	_, err = Run(ctx, sc, WithWorstKeyWindows())
	var ie *InterruptedError
	if !errors.As(err, &ie) || !ie.Worst || ie.Result == nil || ie.Duration != 2*time.Minute || !errors.Is(err, context.Canceled) {
		t.Fatalf("Run interrupted in the second pass = %v (%+v); want an *InterruptedError with Worst and the Result, wrapping context.Canceled", err, ie)
	}
	var want, got bytes.Buffer
	if err := WriteTable(&want, res); err != nil {
		t.Fatal(err)
	}
	if err := WriteTable(&got, ie.Result); err != nil {
		t.Fatal(err)
	}
	if got.String() != want.String() {
		t.Errorf("interrupted Run's Result table:\n%s\nwant the whole run's:\n%s", got.String(), want.String())
	}

	whole := &errCounter{Context: context.Background()}
	ctx.n.Store(2)
	var stdout, stderr bytes.Buffer
	code := MainContext(ctx, append(args, "--out", dir), &stdout, &stderr)
	said := "s, in the second pass that follows each contender's worst key for the --out charts: the run was whole and its results are written, not the report\n"
	var table bytes.Buffer
	whole.n.Store(1 << 30)
	if code := MainContext(whole, args, &table, io.Discard); code != 0 {
		t.Fatalf("whole run without --out: exit %d", code)
	}
	if code != 130 || stdout.String() != table.String() || !strings.HasPrefix(stderr.String(), "floodgate sim: interrupted after ") || !strings.HasSuffix(stderr.String(), said) {
		t.Errorf("sim --out interrupted in the second pass: exit %d, stdout %q, stderr %q; want exit 130, the whole run's table and %q", code, stdout.String(), stderr.String(), said)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("interrupted sim wrote its --out folder (stat: %v)", err)
	}
}
