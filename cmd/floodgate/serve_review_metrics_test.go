package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// serve makes the store's counters at 0 from the start for a remote store
// (store_errors_total by operation, store_fallbacks_total under the
// configured policy), so that an alert on increase() sees the first
// outage; they appeared with their first increment.
func TestServeStoreCountersAtZero(t *testing.T) {
	// A port nothing listens on: the store is not reached, --start-degraded
	// starts all the same.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	out, _, stop := startServe(t, "--store", "redis://"+addr, "--start-degraded", "--on-store-error", "closed")
	defer stop()
	_, _, admin := serveAddrs(t, out.String())
	resp, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, want := range []string{`floodgate_store_errors_total{op="take"}`, `floodgate_store_errors_total{op="reset"}`,
		`floodgate_store_fallbacks_total{op="take",policy="closed"}`, `floodgate_store_fallbacks_total{op="peek",policy="closed"}`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("/metrics lacks %s before any decision", want)
		}
	}
}

// --on-store-error unavailable: serve takes it (FLOODGATE_ON_STORE_ERROR
// too), its help names it, the startup line and /metrics name the policy,
// and a store outage fails the decisions (gRPC UNAVAILABLE, /json and /v1
// 503 with a JSON error) instead of a policy answering them.
func TestServeOnStoreErrorUnavailable(t *testing.T) {
	var help, herr bytes.Buffer
	run(context.Background(), []string{"serve", "-h"}, &help, &herr)
	if !strings.Contains(help.String(), "or unavailable (answer no decision: gRPC UNAVAILABLE") {
		t.Errorf("serve -h does not name --on-store-error unavailable:\n%s", grepLines(help.String(), "on-store-error"))
	}
	// --start-degraded's help does not say the unavailable policy answers.
	if !strings.Contains(help.String(), "--on-store-error answers (unavailable: the decisions fail) and /readyz") {
		t.Errorf("serve -h: --start-degraded's help does not say what unavailable does:\n%s", grepLines(help.String(), "on-store-error answers"))
	}
	// envoyproxy/ratelimit fails the call when Redis does: its REDIS_TIMEOUT
	// points to the policy that does the same.
	if instead, _ := upstreamInstead("REDIS_TIMEOUT"); !strings.Contains(instead, "--on-store-error open|closed|local|unavailable") {
		t.Errorf("REDIS_TIMEOUT's WARN: %q, want it to name --on-store-error unavailable", instead)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens: the store is down
	t.Setenv("FLOODGATE_ON_STORE_ERROR", "unavailable")
	out, errb, stop := startServe(t, "--store", "redis://"+addr, "--start-degraded", "--reload-interval", "0")
	defer stop()
	httpAddr, grpcAddr, admin := serveAddrs(t, out.String())
	if !strings.Contains(errb.String(), "on_store_error=unavailable") {
		t.Errorf("the startup line does not name the policy:\n%s", errb.String())
	}
	resp, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := `floodgate_store_fallbacks_total{op="take",policy="unavailable"} 0`; !strings.Contains(string(b), want) {
		t.Errorf("/metrics lacks %s:\n%s", want, grepLines(string(b), "store_fallbacks_total"))
	}
	if _, err := shouldRateLimit(grpcAddr, insecure.NewCredentials()); status.Code(err) != codes.Unavailable {
		t.Errorf("ShouldRateLimit with the store down: %v, want status UNAVAILABLE", err)
	}
	for _, path := range []string{"/json", "/v1/decide"} {
		resp, err := http.Post("http://"+httpAddr+path, "application/json", strings.NewReader(tlsTestBody))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || string(b) != `{"error":"rate limit decision failed: the store is unavailable"}`+"\n" {
			t.Errorf("POST %s with the store down: %d %s, want 503 with a JSON error", path, resp.StatusCode, b)
		}
	}
}

// TestServeBuildInfo: /metrics carries floodgate_build_info with the
// version `floodgate version` prints and the Go version, at 1.
func TestServeBuildInfo(t *testing.T) {
	out, _, stop := startServe(t)
	defer stop()
	_, _, admin := serveAddrs(t, out.String())
	resp, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	bi, _ := debug.ReadBuildInfo()
	want := fmt.Sprintf(`floodgate_build_info{goversion=%q,version=%q} 1`, runtime.Version(), versionString(version, bi))
	if !strings.Contains(string(b), want) {
		t.Errorf("/metrics lacks %s:\n%s", want, grepLines(string(b), "build_info"))
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
