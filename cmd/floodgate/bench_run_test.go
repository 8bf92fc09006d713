package main

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// decisionServer answers /json requests as admitted by a rule after
// delay; every failEvery-th request (0: none) gets a 500 instead.
func decisionServer(t *testing.T, delay time.Duration, failEvery int64) *httptest.Server {
	t.Helper()
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(delay)
		if failEvery > 0 && n.Add(1)%failEvery == 0 {
			http.Error(w, "broken", http.StatusInternalServerError)
			return
		}
		w.Write([]byte(`{"overallCode":"OK","statuses":[{"code":"OK","currentLimit":{"requestsPerUnit":1,"unit":"SECOND"}}]}`))
	}))
	t.Cleanup(srv.Close)
	return srv
}

// benchRun runs floodgate bench on ctx and returns its exit code, stdout
// and stderr.
func benchRun(ctx context.Context, args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := run(ctx, append([]string{"bench"}, args...), &out, &errb)
	return code, out.String(), errb.String()
}

// -n without -d sends all its requests: the default -d 10s no longer cuts
// it short (here 21 requests of 500ms one after another, 10.5s).
func TestBenchCountAloneIsNotCutAt10s(t *testing.T) {
	srv := decisionServer(t, 500*time.Millisecond, 0)
	code, out, errb := benchRun(context.Background(), "-p", "json", "-addr", srv.URL, "-n", "21", "-c", "1")
	if code != 0 || !strings.Contains(out, "requests    21 in ") || !strings.Contains(out, "ended       all 21 requests done\n") || errb != "" {
		t.Errorf("exit %d, stdout %s, stderr %q; want all 21 requests and exit 0", code, out, errb)
	}
}

// The safety bound of a run given -n alone ends it with exit 1 and says so;
// -d given is a bound chosen, whose end is a normal exit.
func TestBenchSafetyBound(t *testing.T) {
	defer func(d time.Duration) { benchSafetyBound = d }(benchSafetyBound)
	benchSafetyBound = 300 * time.Millisecond
	srv := decisionServer(t, time.Millisecond, 0)
	code, out, errb := benchRun(context.Background(), "-p", "json", "-addr", srv.URL, "-n", "1000000", "-c", "2")
	if code != 1 || !strings.Contains(out, "ended       time bound 300ms reached: ") || !strings.Contains(out, " of 1000000 requests done\n") ||
		!strings.Contains(errb, "floodgate bench: stopped by the safety time bound of 300ms after ") || !strings.Contains(errb, "give -d for a longer run") {
		t.Errorf("safety bound: exit %d, stdout %s, stderr %q; want exit 1 and both saying the time bound ended it", code, out, errb)
	}
	code, out, errb = benchRun(context.Background(), "-p", "json", "-addr", srv.URL, "-n", "1000000", "-c", "2", "-d", "300ms")
	if code != 0 || !strings.Contains(out, "ended       time bound 300ms reached: ") || errb != "" {
		t.Errorf("-d 300ms: exit %d, stdout %s, stderr %q; want exit 0, the report saying the time bound ended it", code, out, errb)
	}
}

// Nothing listening: bench says so at once and sends nothing, instead of
// failing every request of the run at full speed.
func TestBenchCannotReach(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	for _, p := range []string{"grpc", "json", "v1", "http"} {
		t0 := time.Now()
		code, out, errb := benchRun(context.Background(), "-p", p, "-addr", addr, "-n", "100000", "-d", "2s")
		want := "floodgate bench: cannot reach " + addr + ": dial tcp " + addr + ": connect: connection refused"
		if code != 1 || out != "" || !strings.HasPrefix(errb, want) || time.Since(t0) > time.Second {
			t.Errorf("-p %s: exit %d after %v, stdout %q, stderr %q; want exit 1 at once, no report and %q", p, code, time.Since(t0), out, errb, want)
		}
	}
}

// Any failed request makes the exit code 1, with the count on stderr;
// an interrupted run prints its report, says it was interrupted, exits 130.
func TestBenchExitCodes(t *testing.T) {
	srv := decisionServer(t, 0, 10)
	code, out, errb := benchRun(context.Background(), "-p", "json", "-addr", srv.URL, "-n", "100", "-c", "2")
	if code != 1 || !strings.Contains(out, "errors      10 (10.0%)\n") || !strings.Contains(out, "HTTP 500: broken") ||
		errb != "floodgate bench: 10 of 100 requests failed (10.0%; errors in the report)\n" {
		t.Errorf("10%% errors: exit %d, stdout %s, stderr %q; want exit 1 and the count", code, out, errb)
	}

	// The run is interrupted 300 ms after bench is called. The time it
	// reports runs from its own start, after its set-up (0-60 ms here
	// under -race): it must lie between the first request's arrival and
	// the interruption, and bench's whole call.
	var first, interrupted atomic.Int64 // ns since called
	called := time.Now()
	inner := decisionServer(t, 5*time.Millisecond, 0).Config.Handler
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		first.CompareAndSwap(0, int64(time.Since(called)))
		inner.ServeHTTP(w, r)
	}))
	defer slow.Close()
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(300*time.Millisecond, func() { interrupted.Store(int64(time.Since(called))); cancel() })
	code, out, errb = benchRun(ctx, "-p", "json", "-addr", slow.URL, "-n", "1000000", "-c", "2", "-d", "1m")
	took := time.Since(called)
	ended := regexp.MustCompile(`\nended       interrupted after (\d+\.\d\d)s: \d+ of 1000000 requests done\n`).FindStringSubmatch(out)
	said := regexp.MustCompile(`^floodgate bench: interrupted after (\d+\.\d\d)s: `).FindStringSubmatch(errb)
	if code != 130 || ended == nil || said == nil || ended[1] != said[1] {
		t.Fatalf("interrupted: exit %d, stdout %s, stderr %q; want exit 130 and both saying it was interrupted, after the same time", code, out, errb)
	}
	elapsed, _ := strconv.ParseFloat(ended[1], 64) // to the hundredth: within 5 ms
	lo, hi := time.Duration(interrupted.Load()-first.Load()), took
	if at := time.Duration(elapsed * float64(time.Second)); at < lo-5*time.Millisecond || at > hi+5*time.Millisecond {
		t.Errorf("interrupted after %v, said bench; want between %v (the first request to the interruption) and %v (bench's call)", at, lo, hi)
	}
}

// The progress bar is drawn on a terminal by default, never into a file
// or a pipe unless -progress always; -q is -progress never.
func TestBenchProgressFlag(t *testing.T) {
	srv := decisionServer(t, 0, 0)
	for _, c := range []struct {
		args []string
		bar  bool
	}{
		{nil, false}, // auto: the test's stderr is a buffer
		{[]string{"-progress", "auto"}, false},
		{[]string{"-progress", "never"}, false},
		{[]string{"-q"}, false},
		{[]string{"-progress", "always"}, true},
	} {
		args := append([]string{"-p", "json", "-addr", srv.URL, "-n", "50", "-c", "2"}, c.args...)
		code, out, errb := benchRun(context.Background(), args...)
		hasBar := strings.Contains(errb, "\r[")
		if code != 0 || hasBar != c.bar || !strings.Contains(out, "admitted    50 ") {
			t.Errorf("%q: exit %d, stderr %q; want a bar: %v", c.args, code, errb, c.bar)
		}
		if c.bar && (!strings.Contains(errb, "] 100% 50/50 req ") || !strings.HasSuffix(errb, "\n")) {
			t.Errorf("%q: bar %q; want it at 100%% of 50 requests, its line ended", c.args, errb)
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-progress", "sometimes"}, "floodgate bench: -progress sometimes: want auto, always or never\n"},
		{[]string{"-q", "-progress", "always"}, "floodgate bench: -q with -progress always: -q is -progress never; give one of them\n"},
	} {
		code, out, errb := benchRun(context.Background(), append([]string{"-n", "1", "-addr", "127.0.0.1:9"}, c.args...)...)
		if code != 2 || out != "" || errb != c.want {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 2 and %q", c.args, code, out, errb, c.want)
		}
	}
}
