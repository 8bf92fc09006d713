package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
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
