package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// benchArgs is bench's arguments for a run of protocol p against a
// served process's address, bounded by a minute and -n.
func benchArgs(p, addr string, more ...string) []string {
	return append([]string{"-p", p, "-addr", addr, "-n", "100000000", "-d", "1m", "-c", "4",
		"-D", "remote_address=10.0.0.{i}", "-keys", "1000"}, more...)
}

// TestBenchStopsWhenServerDies: a `floodgate serve` killed (SIGKILL)
// mid-run ends the run within -down-after of its death: bench prints the
// report so far, which says the server went away, one line on stderr with
// the reason, and exits 1. Before, the run went on to its bound (here a
// minute), every request an error.
func TestBenchStopsWhenServerDies(t *testing.T) {
	for _, p := range []string{"grpc", "json"} {
		t.Run(p, func(t *testing.T) {
			srv := startBinary(t, nil)
			addr := srv.HTTP
			if p == "grpc" {
				addr = srv.GRPC
			}
			// The server dies once it has counted 10 of the run's requests,
			// not at a fixed time: the report's answers before the death are
			// checked, and a run slower than that to start has none.
			killed := make(chan time.Time, 1)
			go func() {
				for i := 0; i < 1000 && servedRequests(srv.Admin) < 10; i++ { // 10 s at most
					time.Sleep(10 * time.Millisecond)
				}
				srv.Stop(syscall.SIGKILL, 5*time.Second)
				killed <- time.Now()
			}()
			code, out, errb := benchRun(context.Background(), benchArgs(p, addr, "-down-after", "1s")...)
			var took time.Duration // since the kill
			select {
			case at := <-killed:
				took = time.Since(at)
			case <-time.After(20 * time.Second):
				t.Fatal("the server was not killed")
			}
			ended := regexp.MustCompile(`\nended       server gone after \d+\.\d\ds: no answer for 1s, requests failing to reach it \(.*connection refused.*\): [1-9]\d* of 100000000 requests done\n`)
			stderr := regexp.MustCompile(`^floodgate bench: stopped early after \d+\.\d\ds: the server looks gone \(no answer for 1s, requests failing to reach it: .*connection refused.*\); the report covers the [1-9]\d* request\(s\) done by then, [1-9]\d* of them failed\n$`)
			if code != 1 || took > 10*time.Second || !ended.MatchString(out) || !stderr.MatchString(errb) ||
				!regexp.MustCompile(`\nadmitted    [1-9]`).MatchString(out) || !regexp.MustCompile(`\nerrors      [1-9]`).MatchString(out) {
				t.Errorf("exit %d after %v; stdout:\n%s\nstderr %q\nwant exit 1 within 10s of the kill, a report with answers and errors that says the server went away, one line on stderr", code, took, out, errb)
			}
		})
	}
}

// servedRequests sums floodgate_requests_total on a served process's
// admin address (0 when it cannot be read).
func servedRequests(admin string) float64 {
	resp, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var sum float64
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "floodgate_requests_total{") {
			var v float64
			fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v)
			sum += v
		}
	}
	return sum
}

// TestBenchRidesOutRestart: a `floodgate serve` killed and started again
// on the same addresses (under a second or so) does not end a run at the
// default -down-after (5s): it goes on to -d, the restart's failed
// requests counted as errors (exit 1 for them, not for a server gone).
func TestBenchRidesOutRestart(t *testing.T) {
	for _, p := range []string{"grpc", "json"} {
		t.Run(p, func(t *testing.T) {
			srv := startBinary(t, nil)
			addr := srv.HTTP
			if p == "grpc" {
				addr = srv.GRPC
			}
			type result struct {
				code     int
				out, err string
			}
			done := make(chan result, 1)
			go func() {
				code, out, errb := benchRun(context.Background(), append(benchArgs(p, addr), "-d", "4s")...)
				done <- result{code, out, errb}
			}()
			// The kill comes once the server has counted 10 of the run's
			// requests, not at a fixed time: a bench slower to start than
			// that found the server down, or a restart already over.
			for i := 0; i < 1000 && servedRequests(srv.Admin) < 10; i++ { // 10 s at most
				time.Sleep(10 * time.Millisecond)
			}
			t0 := time.Now()
			srv.Stop(syscall.SIGKILL, 5*time.Second)
			startBinary(t, nil, "--http", srv.HTTP, "--grpc", srv.GRPC, "--admin", srv.Admin)
			gap := time.Since(t0)
			var r result
			select {
			case r = <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("bench did not end within 30s of a 4s run")
			}
			code, out, errb := r.code, r.out, r.err
			if gap > 3*time.Second {
				t.Skipf("the restart took %v: too slow a machine for a brief pause", gap)
			}
			if code != 1 || !strings.Contains(out, "\nended       time bound 4s reached: ") || strings.Contains(errb, "stopped early") ||
				!regexp.MustCompile(`\nerrors      [1-9]`).MatchString(out) {
				t.Errorf("restart in %v: exit %d; stdout:\n%s\nstderr %q\nwant the run to reach -d 4s, the restart's failures among its errors", gap, code, out, errb)
			}
		})
	}
}
