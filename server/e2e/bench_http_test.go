package e2e

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/floodgate/floodgate/internal/testbinary"
)

// articleGateway is the source article's budget behind a gateway route:
// 1000 per client address, a token bucket refilling one token every 43
// minutes, so that no refill blurs the count during a test.
const articleGateway = `
domain: article
gateway:
  routes:
    - {name: article, path_prefix: /article, descriptors: [{entries: [{source: remote_address}]}]}
descriptors:
  - key: remote_address
    rate_limit: {name: per-ip, algorithm: token_bucket, period: 720h, requests_per_unit: 1000}
`

// bench runs the real binary's `floodgate bench` with args and returns its
// exit code, stdout and stderr.
func bench(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	cmd := exec.Command(testbinary.Path(t), append([]string{"bench"}, args...)...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, out.String(), errb.String()
}

// reportCount reads "label  N" from a bench report (-1: missing).
func reportCount(report, label string) int {
	m := regexp.MustCompile(`(?m)^` + label + `\s+(\d+)`).FindStringSubmatch(report)
	if m == nil {
		return -1
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// The source article's scenario through the real binary in gateway mode,
// with the real binary's `floodgate bench -p http` as the client: 1200
// requests from 50 keep-alive callers at a budget of 1000 → exactly 1000
// admitted (each reaching the upstream once) and 200 refused with 429, no
// errors; bench opens no more connections than callers.
func TestBenchHTTPThroughGateway(t *testing.T) {
	var reached, upConns atomic.Int64
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
		io.WriteString(w, "article\n")
	}))
	up.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			upConns.Add(1)
		}
	}
	up.Start()
	defer up.Close()
	p := start(t, articleGateway, "--upstream", up.URL, "--reload-interval", "0")

	code, out, errb := bench(t, "-p", "http", "-addr", "http://"+p.http+"/article", "-n", "1200", "-c", "50", "-conns", "50", "-d", "2m", "-progress", "always")
	admitted, rejected, errs, conns := reportCount(out, "admitted"), reportCount(out, "rejected"), reportCount(out, "errors"), reportCount(out, "connections")
	if code != 0 || admitted != 1000 || rejected != 200 || errs != 0 || reached.Load() != 1000 {
		t.Fatalf("exit %d, admitted %d rejected %d errors %d, upstream reached %d; want exit 0, exactly 1000, 200, 0 and 1000\n%s%s",
			code, admitted, rejected, errs, reached.Load(), out, errb)
	}
	for _, want := range []string{"statuses    1000 × 200, 200 × 429\n", "rejected    200 (16.7%) (HTTP 429)\n", "histogram\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "note:") {
		t.Errorf("the route's responses carry the rate limit fields: no note expected\n%s", out)
	}
	if conns < 1 || conns > 50 {
		t.Errorf("bench opened %d connections for 50 callers, want 1 to 50\n%s", conns, out)
	}
	if !strings.Contains(errb, "100%") {
		t.Errorf("no progress bar reaching 100%% on stderr: %q", errb)
	}
	t.Logf("upstream connections opened by the gateway for 1000 requests: %d", upConns.Load())

	// Off the routes nothing is limited, and the report says so.
	code, out, errb = bench(t, "-p", "http", "-addr", "http://"+p.http+"/elsewhere?id={i}", "-n", "50", "-c", "5", "-keys", "5", "-q")
	if code != 0 || reportCount(out, "admitted") != 50 ||
		!strings.Contains(out, "note: 50 of 50 admitted responses carried no RateLimit-Policy or X-RateLimit-Limit field") {
		t.Errorf("unrouted path: exit %d\n%s%s", code, out, errb)
	}
}

// Statuses the gateway refuses with count as rejected only when
// -refused-status names them; others are errors, shown with their body.
func TestBenchHTTPRefusedStatus(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		code, _ := strconv.Atoi(r.URL.Query().Get("status"))
		if r.Header.Get("X-Probe") != "k-"+r.URL.Query().Get("id") || r.Method != "PUT" {
			code = http.StatusBadRequest
		}
		if b, _ := io.ReadAll(r.Body); string(b) != "payload" {
			code = http.StatusBadRequest
		}
		w.WriteHeader(code)
		fmt.Fprintf(w, "status %d", code)
	}))
	defer up.Close()
	base := up.URL + "/x?id={i}&status="
	common := []string{"-n", "20", "-c", "4", "-keys", "3", "-q", "-method", "PUT", "-H", "X-Probe: k-{i}", "-body", "payload"}
	for _, tc := range []struct {
		status, refused    string
		admitted, rejected int
		errors             int
	}{
		{"204", "", 20, 0, 0},
		{"302", "", 20, 0, 0}, // not followed
		{"429", "", 0, 20, 0},
		{"503", "", 0, 0, 20},
		{"503", "429,503", 0, 20, 0},
	} {
		args := append([]string{"-p", "http", "-addr", base + tc.status}, common...)
		if tc.refused != "" {
			args = append(args, "-refused-status", tc.refused)
		}
		code, out, errb := bench(t, args...)
		if reportCount(out, "admitted") != tc.admitted || reportCount(out, "rejected") != tc.rejected || reportCount(out, "errors") != tc.errors {
			t.Errorf("status %s -refused-status %q: exit %d, want admitted %d rejected %d errors %d\n%s%s",
				tc.status, tc.refused, code, tc.admitted, tc.rejected, tc.errors, out, errb)
		}
		if tc.errors > 0 && (code != 1 || !strings.Contains(out, "HTTP 503: status 503")) {
			t.Errorf("all errors: exit %d (want 1), report lacks the status and body\n%s", code, out)
		}
	}
}

// Bad -p http flags: exit 2 and one line per flag at fault, naming it.
func TestBenchHTTPBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"-p", "http", "-n", "1", "-refused-status", "429,abc"},
			[]string{"floodgate bench: -refused-status 429,abc: want statuses from 400 to 599, comma-separated (e.g. 429,503)"}},
		{[]string{"-p", "http", "-n", "1", "-refused-status", "200"},
			[]string{"-refused-status 200: want statuses from 400 to 599"}},
		{[]string{"-p", "http", "-n", "1", "-H", "NoColon", "-method", "GE T"},
			[]string{"-H NoColon: want 'Name: value'", `-method "GE T": want a method name such as GET or POST`}},
		{[]string{"-p", "http", "-n", "1", "-D", "user=x", "-hits", "2"},
			[]string{"-D: only with -p grpc, json or v1 (not -p http)", "-hits: only with -p grpc, json or v1 (not -p http)"}},
		{[]string{"-p", "json", "-n", "1", "-H", "X: y", "-method", "POST"},
			[]string{"-method: only with -p http (not -p json)", "-H: only with -p http (not -p json)"}},
		{[]string{"-p", "http", "-n", "1", "-addr", "ftp://127.0.0.1:1/x"},
			[]string{"-addr ftp://127.0.0.1:1/x: -p http takes an http:// or https:// URL (or host:port)"}},
		{[]string{"-p", "htp", "-n", "1"},
			[]string{"-p htp: want grpc, json, v1 or http"}},
	} {
		code, out, errb := bench(t, tc.args...)
		if code != 2 || out != "" {
			t.Errorf("bench %q: exit %d stdout %q, want exit 2 and nothing", tc.args, code, out)
		}
		for _, w := range tc.want {
			if !strings.Contains(errb, w) {
				t.Errorf("bench %q: stderr %q lacks %q", tc.args, errb, w)
			}
		}
	}
}

// A gateway whose upstream refuses connections answers 502 and counts the
// failure on /metrics as floodgate_gateway_upstream_errors_total with the
// reason connect, and the answers as its own 502s in
// floodgate_gateway_responses_total: serve wires the gateway's counters to
// its registry.
func TestGatewayUpstreamErrorsCounted(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close() // nothing listens there now
	p := start(t, articleGateway, "--upstream", "http://"+dead, "--reload-interval", "0")
	for range 3 {
		if code, body, err := get("http://" + p.http + "/article"); code != http.StatusBadGateway {
			t.Fatalf("through a dead upstream: %d %s %v, want 502", code, body, err)
		}
	}
	_, metrics, err := get("http://" + p.admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`floodgate_gateway_upstream_errors_total{reason="connect"} 3`,
		`floodgate_gateway_responses_total{by="floodgate",code="502"} 3`, // answered by the gateway, not the upstream
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("no %q on /metrics:\n%s", want, grepLines(metrics, "gateway"))
		}
	}
}

// grepLines returns the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
