package gateway_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/floodgate/floodgate/internal/testbinary"
	"github.com/floodgate/floodgate/middleware"
)

// freeAddr returns a loopback address nothing listens on right now.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func TestMain(m *testing.M) { os.Exit(testbinary.Main(m)) }

// The source article's scenario through the real binary in gateway mode:
// `floodgate serve --upstream URL` in front of a real upstream, 1200
// requests at a budget of 1000 → exactly 1000 × 200 (all reaching the
// upstream) and 200 × 429; the fields and the problem body on the way.
func TestBinaryGateway(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the floodgate binary")
	}
	var reached atomic.Int64
	next := make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("/ping", func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
		io.WriteString(w, "pong")
	})
	mux.HandleFunc("/events", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: first\n\n")
		w.(http.Flusher).Flush()
		<-next
		io.WriteString(w, "data: second\n\n")
	})
	mux.HandleFunc("/ws", func(w http.ResponseWriter, r *http.Request) {
		conn, rw, ok := upgrade(w)
		if !ok {
			return
		}
		defer conn.Close()
		if line, err := rw.ReadString('\n'); err == nil {
			rw.WriteString("echo " + line)
			rw.Flush()
		}
	})
	up := httptest.NewServer(mux)
	defer up.Close()

	dir := t.TempDir()
	// A token bucket of 1000 that refills one token every 43 minutes: no
	// refill can blur the count during the test.
	cfg := `
domain: edge
gateway:
  routes:
    - name: ping
      path_prefix: /ping
      descriptors: [{entries: [{source: remote_address}]}]
descriptors:
  - key: remote_address
    rate_limit: {name: per-ip, algorithm: token_bucket, period: 720h, requests_per_unit: 1000}
`
	if err := os.WriteFile(filepath.Join(dir, "edge.yaml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	fg := testbinary.Serve(t, nil, "--config", dir, "--upstream", up.URL, "--reload-interval", "0")
	httpAddr := fg.HTTP
	base := "http://" + httpAddr

	first := do(t, "GET", base+"/ping")
	if first.status != 200 || first.body != "pong" {
		t.Fatalf("first request: %d %q", first.status, first.body)
	}
	for k, want := range map[string]string{
		"RateLimit-Policy":      `"per-ip";q=1000;w=2592000`,
		"X-RateLimit-Limit":     "1000",
		"X-RateLimit-Remaining": "999",
	} {
		if got := first.h.Get(k); got != want {
			t.Errorf("first request: %s = %q, want %q", k, got, want)
		}
	}
	ok, limited, other := load(t, base+"/ping", 1199, 32)
	if ok != 999 || limited != 200 || other != 0 || reached.Load() != 1000 {
		t.Errorf("200s %d (+1), 429s %d, other %d, upstream reached %d; want 1000, 200, 0, 1000", ok, limited, other, reached.Load())
	}
	// Streaming and upgrades pass through the server untouched.
	resp, err := http.Get(base + "/events")
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	if line, err := br.ReadString('\n'); err != nil || line != "data: first\n" {
		t.Errorf("first event through the binary: %q %v (not flushed)", line, err)
	}
	close(next)
	if rest, _ := io.ReadAll(br); string(rest) != "\ndata: second\n\n" {
		t.Errorf("rest of the stream: %q", rest)
	}
	resp.Body.Close()
	conn, err := net.Dial("tcp", httpAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
	cr := bufio.NewReader(conn)
	if up, err := http.ReadResponse(cr, nil); err != nil || up.StatusCode != 101 {
		t.Fatalf("upgrade through the binary: %v %v", up, err)
	}
	io.WriteString(conn, "hello\n")
	if got, err := cr.ReadString('\n'); err != nil || got != "echo hello\n" {
		t.Errorf("through the upgraded connection: %q %v", got, err)
	}

	last := do(t, "GET", base+"/ping")
	var p middleware.Problem
	// One token per 2592 s, a little of it refilled while the test ran.
	retry, _ := strconv.Atoi(last.h.Get("Retry-After"))
	if last.status != 429 || json.Unmarshal([]byte(last.body), &p) != nil || p.Type != middleware.TypeQuotaExceeded ||
		fmt.Sprint(p.ViolatedPolicies) != "[per-ip]" || retry < 2400 || retry > 2592 {
		t.Errorf("over the limit: %d Retry-After %q %s", last.status, last.h.Get("Retry-After"), last.body)
	}
}
