package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/floodgate/floodgate/internal/testserver"
)

// In gateway mode under --on-store-error unavailable, a store outage fails
// each proxied request (503): serve logged a WARN "gateway" line for every
// one of them, with the store error's text and so the store key, which
// holds the client's address. The store log's WARN lines report the
// outage (once a minute per cause, without the key); the gateway's line
// for such a request is a DEBUG record naming no key.
func TestServeGatewayStoreDownLogsNoKeyPerRequest(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "upstream") }))
	defer up.Close()
	mc := testserver.NewMemcached(t)
	if mc == nil {
		t.Skip("no memcached")
	}
	_, errb, stop := startServe(t, "--config", gatewayConfigDir(t), "--reload-interval", "0", "--upstream", up.URL,
		"--store", "memcached://"+mc.Addr, "--on-store-error", "unavailable", "--store-timeout", "200ms")
	addrs := map[string]string{}
	for _, m := range addrOf.FindAllStringSubmatch(errb.String(), -1) {
		addrs[m[1]] = m[2]
	}
	if addrs["http"] == "" {
		stop()
		t.Fatalf("startup log lacks the address: %s", errb.String())
	}
	get := func() int {
		resp, err := http.Get("http://" + addrs["http"] + "/ping")
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := get(); code != http.StatusOK {
		t.Fatalf("request with the store up: %d, want 200", code)
	}
	if err := mc.Kill(); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if code := get(); code != http.StatusServiceUnavailable {
			t.Fatalf("request %d with the store down: %d, want 503", i, code)
		}
	}
	if code := stop(); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	log := errb.String()
	if lines := grepLines(log, "level=WARN msg=gateway"); lines != "" {
		t.Errorf("a WARN line per request the store failed:\n%s", lines)
	}
	// The client's address is the descriptor's value, in the store key.
	if lines := grepLines(log, "127.0.0.1#"); lines != "" {
		t.Errorf("lines with the store key:\n%s", lines)
	}
	if want := "the failure policy (unavailable) failed the request"; !strings.Contains(log, want) {
		t.Errorf("no store log line %q:\n%s", want, log)
	}
}
