package gateway_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate/floodgate/gateway"
	"github.com/floodgate/floodgate/middleware"
	"github.com/floodgate/floodgate/policy"
)

// bodyRig is a gateway in front of up on adaptiveConfig, recording its
// error log, its upstream errors and the responses it counts.
type bodyRig struct {
	e     *policy.Engine
	srv   *httptest.Server
	logs  errLog
	count reasons
	mu    sync.Mutex
	resps []string // "status upstream" per response
}

func newBodyRig(t *testing.T, up string, wrap func(http.Handler) http.Handler) *bodyRig {
	t.Helper()
	r := &bodyRig{e: engine(t, adaptiveConfig, newClock(t0))}
	gw, err := gateway.New(r.e.Config(), r.e, up, gateway.WithErrorLog(r.logs.add), gateway.WithUpstreamErrors(r.count.add),
		gateway.WithResponses(func(_ string, status int, upstream bool) {
			r.mu.Lock()
			r.resps = append(r.resps, fmt.Sprint(status, " ", upstream))
			r.mu.Unlock()
		}))
	if err != nil {
		t.Fatal(err)
	}
	var h http.Handler = gw
	if wrap != nil {
		h = wrap(gw)
	}
	r.srv = httptest.NewServer(h)
	t.Cleanup(r.srv.Close)
	r.e.StepAdaptive(t0) // start the schedule
	return r
}

func (r *bodyRig) responses() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.resps, ", ")
}

// send writes request on a connection of its own, half-closes it when
// asked (the client has no more to send), and returns the answer's
// status and problem detail.
func (r *bodyRig) send(t *testing.T, request string, halfClose bool) (int, string) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(r.srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(conn, request); err != nil {
		t.Fatal(err)
	}
	if halfClose {
		conn.(*net.TCPConn).CloseWrite()
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("%q: %v", request, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var p middleware.Problem
	json.Unmarshal(b, &p)
	return resp.StatusCode, p.Detail
}

// step steps the adaptive controller and returns backend's samples
// and errors in the step.
func (r *bodyRig) step(t *testing.T, at time.Duration) (samples, errs int64) {
	t.Helper()
	if p := adaptiveState(t, r.e, "backend").Pending; p == 0 {
		return 0, 0
	}
	for _, ch := range r.e.StepAdaptive(t0.Add(at)) {
		if ch.Rule == "backend" {
			return int64(ch.Samples), int64(ch.Errors)
		}
	}
	t.Fatal("backend was not stepped")
	return 0, 0
}

// readsBody is an upstream that reads the request body and tells its
// length.
func readsBody(t *testing.T) *httptest.Server {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		fmt.Fprintf(w, "got %d bytes", len(b))
	}))
	t.Cleanup(up.Close)
	return up
}

// A request body the client breaks — a malformed chunk size, fewer bytes
// than its Content-Length before the client half-closes, more than a
// limit an outer http.MaxBytesHandler sets — is the client's failure: 400
// (413 over the limit) with a problem body saying so, not 502; no
// upstream error counted or logged, no adaptive sample (each was a failed
// sample: 5% of bad requests from one client held an adaptive rule at its
// min), and the response counted as the gateway's. A good upload through
// the same gateway still feeds its sample.
func TestClientBodyFailureIsTheClients(t *testing.T) {
	const badChunk = "POST /api/x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"
	const short = "POST /api/x HTTP/1.1\r\nHost: a\r\nContent-Length: 100\r\n\r\n0123456789"
	const long = "POST /api/x HTTP/1.1\r\nHost: a\r\nContent-Length: 100\r\n\r\n" + "0123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123456789"
	for _, c := range []struct {
		name, request string
		halfClose     bool
		limit         int64
		status        int
		detail        string
	}{
		{"malformed chunk size", badChunk, false, 0, 400, "the request body was malformed or cut short"},
		{"malformed chunk size, half-closed", badChunk, true, 0, 400, "the request body was malformed or cut short"},
		{"shorter than its Content-Length, half-closed", short, true, 0, 400, "the request body was malformed or cut short"},
		{"over http.MaxBytesHandler's limit", long, false, 16, 413, "the request body is larger than 16 bytes"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var wrap func(http.Handler) http.Handler
			if c.limit > 0 {
				wrap = func(h http.Handler) http.Handler { return http.MaxBytesHandler(h, c.limit) }
			}
			r := newBodyRig(t, readsBody(t).URL, wrap)
			for range 3 {
				if status, detail := r.send(t, c.request, c.halfClose); status != c.status || detail != c.detail {
					t.Fatalf("%d %q, want %d %q (log: %s)", status, detail, c.status, c.detail, r.logs.String())
				}
			}
			if got := r.count.String(); got != "map[]" {
				t.Errorf("upstream errors counted: %s, want none", got)
			}
			if l := r.logs.String(); strings.Contains(l, "upstream http") || strings.Count(l, "\n") != 0 || !strings.Contains(l, "the client's request body could not be read") {
				t.Errorf("log:\n%s\nwant one line (3 requests, one cause) blaming the client, not the upstream", l)
			}
			want := strings.TrimSuffix(strings.Repeat(fmt.Sprint(c.status, " false, "), 3), ", ")
			if got := r.responses(); got != want {
				t.Errorf("responses counted: %s, want %s (the gateway's)", got, want)
			}
			if s, e := r.step(t, time.Second); s != 0 || e != 0 {
				t.Errorf("backend stepped on %d samples, %d errors after 3 broken bodies, want none", s, e)
			}
			// A good upload through the same gateway is a sample.
			if status, _ := r.send(t, strings.Replace(short, "100", "10", 1), false); status != 200 {
				t.Fatalf("good upload: %d, want 200", status)
			}
			if s, e := r.step(t, 2*time.Second); s != 1 || e != 0 {
				t.Errorf("backend stepped on %d samples, %d errors after a good upload, want 1 and 0", s, e)
			}
		})
	}
}

// An upstream that answered its header while the body was coming (a
// full-duplex upstream), whose response is then cut because the client's
// body broke (the transport closes the upstream connection on it), did
// not fail: nothing counted or logged against it, no sample.
func TestClientBodyFailureAfterTheHeader(t *testing.T) {
	answered := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.NewResponseController(w).EnableFullDuplex()
		io.WriteString(w, "start\n")
		w.(http.Flusher).Flush()
		close(answered)
		n, _ := io.Copy(io.Discard, r.Body)
		fmt.Fprintf(w, "got %d bytes\n", n)
	}))
	t.Cleanup(up.Close)
	r := newBodyRig(t, up.URL, nil)
	conn, err := net.Dial("tcp", strings.TrimPrefix(r.srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(conn, "POST /api/x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n")
	select {
	case <-answered:
	case <-time.After(10 * time.Second):
		t.Fatal("the upstream got no request")
	}
	time.Sleep(100 * time.Millisecond) // the gateway has the upstream's header
	io.WriteString(conn, "zz\r\n")
	b, _ := io.ReadAll(conn) // until the gateway closes the connection
	if strings.Contains(string(b), "got ") {
		t.Fatalf("the upstream got the whole body: %q", b)
	}
	time.Sleep(100 * time.Millisecond) // the handler has returned
	if got := r.count.String(); got != "map[]" {
		t.Errorf("upstream errors counted: %s, want none", got)
	}
	if l := r.logs.String(); strings.Contains(l, "upstream http") {
		t.Errorf("log:\n%s\nwant nothing against the upstream", l)
	}
	if s, e := r.step(t, time.Second); s != 0 || e != 0 {
		t.Errorf("backend stepped on %d samples, %d errors, want none", s, e)
	}
}

// An upstream that resets the connection while the client's good body is
// being sent is the upstream's failure still: 502, counted as a reset,
// logged against the upstream, one failed sample.
func TestUpstreamResetMidUploadIsTheUpstreams(t *testing.T) {
	reset := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.ReadFull(r.Body, make([]byte, 10))
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		conn.(*net.TCPConn).SetLinger(0)
		conn.Close()
		close(reset)
	}))
	t.Cleanup(up.Close)
	r := newBodyRig(t, up.URL, nil)
	// The rest of the body comes once the upstream has reset: the
	// gateway is sending it when the upstream fails.
	body := io.MultiReader(strings.NewReader("0123456789"), readerFunc(func(p []byte) (int, error) {
		<-reset
		return copy(p, strings.Repeat("x", 100)), io.EOF
	}))
	req, err := http.NewRequest("POST", r.srv.URL+"/api/x", body)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = 110
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var p middleware.Problem
	json.Unmarshal(b, &p)
	if resp.StatusCode != http.StatusBadGateway || p.Detail != "the upstream could not be reached" {
		t.Errorf("%d %s, want 502", resp.StatusCode, b)
	}
	if got := r.count.String(); got != "map[reset:1]" {
		t.Errorf("upstream errors counted: %s, want map[reset:1]", got)
	}
	if l := r.logs.String(); !strings.Contains(l, `route "api": upstream http`) || strings.Contains(l, "client") {
		t.Errorf("log:\n%s\nwant the upstream's failure", l)
	}
	if got := r.responses(); got != "502 false" {
		t.Errorf("responses counted: %s, want 502 false", got)
	}
	if s, e := r.step(t, time.Second); s != 1 || e != 1 {
		t.Errorf("backend stepped on %d samples, %d errors, want 1 failed sample", s, e)
	}
}

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }
