package server_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/floodgate/floodgate/server"
)

// sendPartial opens a raw connection to addr and sends the headers of a
// POST to path announcing a 100-byte body, then only "{".
func sendPartial(t *testing.T, addr, path string) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	req := "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"
	if _, err := io.WriteString(conn, req); err != nil {
		t.Fatal(err)
	}
	return conn
}

// A client that sends the headers and part of the body is answered 408
// with the usual JSON error once the body timeout passes, and its
// connection is closed, on every handler that reads a body.
func TestSlowBodyTimesOut(t *testing.T) {
	const timeout = 100 * time.Millisecond
	e := newEnv(t, server.WithBodyTimeout(timeout))
	for _, c := range []struct {
		srv  *httptest.Server
		path string
	}{
		{e.http, "/v1/decide"}, {e.http, "/v1/peek"}, {e.http, "/v1/observe"}, {e.http, "/json"},
		{e.admin, "/admin/api/inspect"},
	} {
		conn := sendPartial(t, c.srv.Listener.Addr().String(), c.path)
		// Without a body timeout the server waits for the other 99 bytes
		// forever; the client gives up long before.
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("%s with a partial body: no answer: %v", c.path, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var msg struct{ Error string }
		if resp.StatusCode != http.StatusRequestTimeout || resp.Header.Get("Content-Type") != "application/json" ||
			json.Unmarshal(body, &msg) != nil || msg.Error != "request body not received within 100ms" {
			t.Errorf("%s with a partial body: %d %s %q; want 408 application/json {\"error\": \"request body not received within 100ms\"}",
				c.path, resp.StatusCode, resp.Header.Get("Content-Type"), body)
		}
		if n, err := br.Read(make([]byte, 1)); n != 0 || err != io.EOF {
			t.Errorf("%s: after the 408 the connection reads %d bytes, %v; want it closed (EOF)", c.path, n, err)
		}
	}
	// A body that arrives in time is decided as usual.
	if code, body, _ := do(t, "POST", e.http.URL+"/v1/decide", "application/json",
		[]byte(`{"domain":"quota","descriptors":[{"entries":[{"key":"k","value":"v"}]}]}`)); code != 200 {
		t.Errorf("a whole body: %d %s", code, body)
	}
}

// The body timeout bounds reading the body, not the decision: a "wait":
// true request held longer than it is still admitted.
func TestBodyTimeoutDoesNotCutWaits(t *testing.T) {
	srv := serverFor(t, `domain: w
descriptors:
  - key: k
    rate_limit: {algorithm: gcra, unit: second, requests_per_unit: 4, burst: 1, strategy: wait, max_wait: 5s}
`, server.WithBodyTimeout(50*time.Millisecond))
	hs := httptest.NewServer(srv.HTTPHandler())
	t.Cleanup(hs.Close)
	req := []byte(`{"domain":"w","wait":true,"descriptors":[{"entries":[{"key":"k","value":"v"}]}]}`)
	if code, body, _ := do(t, "POST", hs.URL+"/v1/decide", "application/json", req); code != 200 {
		t.Fatalf("first request: %d %s", code, body)
	}
	// The next slot is 250ms away: five body timeouts.
	code, body, _ := do(t, "POST", hs.URL+"/v1/decide", "application/json", req)
	var out server.V1Response
	if code != 200 || json.Unmarshal(body, &out) != nil || out.WaitedMS < 100 {
		t.Fatalf("a request waiting past the body timeout: %d %s; want 200 after a wait of about 250ms", code, body)
	}
}

// A request answered without its body being read — a 401, a 403, a 404,
// GET /metrics — whose client declares a body and never sends it: net/http
// reads the unread body before writing the answer, with no deadline of its
// own, so such a client held its connection (and a goroutine) for as long
// as it kept it open, as many connections as it opened. The body timeout
// bounds that read too: the answer comes once it passes, and the
// connection is closed.
func TestUnreadBodyBounded(t *testing.T) {
	const timeout = 100 * time.Millisecond
	open := newEnv(t, server.WithBodyTimeout(timeout))
	guarded := newEnv(t, server.WithBodyTimeout(timeout), server.WithAdminToken("tok"), server.WithObserveToken("obs"))
	for _, c := range []struct {
		srv          *httptest.Server
		method, path string
		code         int
	}{
		{open.http, "GET", "/healthcheck", 200},
		{open.http, "POST", "/nope", 404},
		{open.admin, "GET", "/metrics", 200},
		{open.admin, "GET", "/healthz", 200},
		{open.admin, "POST", "/admin/api/nope", 404},
		{guarded.admin, "POST", "/admin/api/reset", 401},
		{guarded.http, "POST", "/v1/observe", 401},
	} {
		conn, err := net.Dial("tcp", c.srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		io.WriteString(conn, c.method+" "+c.path+" HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\n")
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Errorf("%s %s declaring a body never sent: no answer: %v", c.method, c.path, err)
			continue
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.code {
			t.Errorf("%s %s declaring a body never sent: %d, want %d", c.method, c.path, resp.StatusCode, c.code)
		}
		if n, err := br.Read(make([]byte, 1)); n != 0 || err != io.EOF {
			t.Errorf("%s %s: after the answer the connection reads %d bytes, %v; want it closed (EOF)", c.method, c.path, n, err)
		}
	}
}
