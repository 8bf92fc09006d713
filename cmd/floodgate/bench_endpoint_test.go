package main

import (
	"context"
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
