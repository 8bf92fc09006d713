package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// -addr http://host:port/json, the URL a user has just posted to with
// curl, sent every request of -p json to /json/json (404, all errors):
// bench appends the endpoint to the URL it is given. The endpoint at the
// end of the URL is now taken off; the other protocol's endpoint is an
// error that says what to write.
func TestBenchAddrWithEndpoint(t *testing.T) {
	var mu sync.Mutex
	paths := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths[r.URL.Path]++
		mu.Unlock()
		switch r.URL.Path {
		case "/json":
			w.Write([]byte(`{"overallCode":"OK","statuses":[{"code":"OK","currentLimit":{"requestsPerUnit":1,"unit":"SECOND"}}]}`))
		case "/v1/decide":
			w.Write([]byte(`{"code":"OK","allowed":true,"statuses":[{"code":"OK","matched":true,"rule":"r","limit":1,"remaining":0}]}`))
		default:
			http.Error(w, `{"error":"no such endpoint"}`, http.StatusNotFound)
		}
	}))
	t.Cleanup(srv.Close)
	for _, c := range []struct{ p, addr, path string }{
		{"json", srv.URL + "/json", "/json"},
		{"json", srv.URL + "/json/", "/json"},
		{"v1", srv.URL + "/v1/decide", "/v1/decide"},
		{"json", srv.URL, "/json"},
	} {
		mu.Lock()
		clear(paths)
		mu.Unlock()
		code, out, errb := benchRun(context.Background(), "-p", c.p, "-addr", c.addr, "-n", "3", "-c", "1", "-q")
		mu.Lock()
		got := paths[c.path]
		others := len(paths)
		mu.Unlock()
		if code != 0 || got != 3 || others != 1 || !strings.Contains(out, "admitted    3 (100.0%)") || !strings.Contains(out, "target      "+c.p+" "+srv.URL+" ") {
			t.Errorf("-p %s -addr %s: exit %d, paths %v, stdout %s, stderr %q; want the 3 requests on %s, all admitted, target %s",
				c.p, c.addr, code, paths, out, errb, c.path, srv.URL)
		}
	}
	for _, c := range []struct{ p, addr, want string }{
		{"json", srv.URL + "/v1/decide", "floodgate bench: -addr " + srv.URL + "/v1/decide: ends in /v1/decide, the endpoint of -p v1; -p json posts to " +
			srv.URL + "/json: give the server's URL without the path (" + srv.URL + "), or -p v1 for that endpoint\n"},
		{"v1", srv.URL + "/json", "floodgate bench: -addr " + srv.URL + "/json: ends in /json, the endpoint of -p json; -p v1 posts to " +
			srv.URL + "/v1/decide: give the server's URL without the path (" + srv.URL + "), or -p json for that endpoint\n"},
	} {
		code, out, errb := benchRun(context.Background(), "-p", c.p, "-addr", c.addr, "-n", "3", "-q")
		if code != 2 || out != "" || errb != c.want {
			t.Errorf("-p %s -addr %s: exit %d, stdout %q, stderr %q; want exit 2 and %q", c.p, c.addr, code, out, errb, c.want)
		}
	}
}

// A run against another of serve's listeners, or in plaintext against a
// TLS one, failed every request with the transport's words alone ("error
// reading server preface: EOF", "malformed HTTP response \x00\x00...", or
// a reset, by timing): bench now says which mistake it was.
func TestBenchWrongListenerHint(t *testing.T) {
	dir, _ := writeConfig(t, benchLimitConfig)
	out, errb, stop := startServe(t, "--config", dir, "--reload-interval", "0")
	httpAddr, grpcAddr, adminAddr := serveAddrs(t, out.String())
	ca := newTestCA(t, "test CA")
	cert, key, _ := tlsFilesFor(t, ca)
	tlsOut, tlsErrb, tlsStop := startServe(t, "--config", dir, "--reload-interval", "0", "--tls-cert", cert, "--tls-key", key)
	_, tlsGRPCAddr, _ := serveAddrs(t, tlsOut.String())
	defer func() {
		if code := stop(); code != 0 {
			t.Errorf("serve: exit %d after cancel: %s", code, errb.String())
		}
		if code := tlsStop(); code != 0 {
			t.Errorf("serve --tls-cert: exit %d after cancel: %s", code, tlsErrb.String())
		}
	}()
	const (
		toHTTP = "floodgate bench: no request answered: an HTTP/1.1 server answered the gRPC calls: -p grpc takes serve's --grpc address (127.0.0.1:8081 by default); -p json or v1 take its --http address\n"
		toGRPC = "floodgate bench: no request answered: the server does not speak HTTP/1.1 (it opens with HTTP/2 frames, as serve's --grpc address does): -p %s takes serve's --http address (127.0.0.1:8080 by default); -p grpc takes its --grpc address\n"
		toTLS  = "floodgate bench: no request answered: the server speaks TLS (serve --tls-cert) and closed every plaintext connection: add -tls (with -tls-ca FILE for a private CA)\n"
	)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-p", "grpc", "-addr", httpAddr}, toHTTP},
		{[]string{"-p", "grpc", "-addr", adminAddr}, toHTTP},
		{[]string{"-p", "json", "-addr", grpcAddr}, fmt.Sprintf(toGRPC, "json")},
		{[]string{"-p", "v1", "-addr", grpcAddr}, fmt.Sprintf(toGRPC, "v1")},
		{[]string{"-p", "grpc", "-addr", tlsGRPCAddr}, toTLS},
	} {
		args := append([]string{"-q", "-n", "3", "-c", "1", "-domain", "bench", "-D", "k=x"}, c.args...)
		code, stdout, stderr := benchRun(context.Background(), args...)
		if code != 1 || !strings.Contains(stdout, "errors      3 (100.0%)") || !strings.HasSuffix(stderr, c.want) {
			t.Errorf("bench %v: exit %d, stdout %s, stderr %q; want exit 1, 3 errors and the hint %q", args, code, stdout, stderr, c.want)
		}
	}
	// Right address, right protocol: no hint.
	code, stdout, stderr := benchRun(context.Background(), "-q", "-n", "3", "-c", "1", "-domain", "bench", "-D", "k=y", "-p", "grpc", "-addr", grpcAddr)
	if code != 0 || !strings.Contains(stdout, "admitted    3 (100.0%)") || stderr != "" {
		t.Errorf("bench -p grpc -addr %s: exit %d, stdout %s, stderr %q; want exit 0, 3 admitted, nothing on stderr", grpcAddr, code, stdout, stderr)
	}
}
