package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// writeConfig writes one file of a fresh configuration folder.
func writeConfig(t *testing.T, body string) (dir, file string) {
	t.Helper()
	dir = t.TempDir()
	file = filepath.Join(dir, "edge.yaml")
	if err := os.WriteFile(file, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, file
}

const userRoute = `domain: edge
gateway:
  routes:
    - path_prefix: /u
      descriptors:
        - entries:
            - source: user
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 1}
`

const degradeRoute = `domain: edge
gateway:
  routes: [{path_prefix: /d, descriptors: [{entries: [{source: remote_address}]}]}]
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 1, strategy: degrade, fallback: cached}
`

// validate fails what serve --upstream cannot build, at the entry's or the
// rule's line; a route descriptor that no rule limits is a warning.
func TestValidateGatewayRoutes(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		code       int
		want       string
	}{
		{"user without user_header", userRoute, 1,
			`edge.yaml:7: gateway: routes[0].descriptors[0].entries[0].source: user needs user_header or the WithUser option`},
		{"degrade without a fallback", degradeRoute, 1,
			`edge.yaml:6: rule "remote_address": strategy degrade needs the fallback "cached", which the gateway does not have`},
		{"same requests", "domain: edge\ngateway:\n  routes:\n    - {path_prefix: /x}\n    - {path_prefix: /x/}\n", 1,
			`edge.yaml:5: gateway: routes[1]: matches the same requests as routes[0]`},
		{"unused key", "domain: edge\ngateway:\n  routes:\n    - descriptors: [{entries: [{source: \"header:X-Key\"}]}]\n" +
			"descriptors:\n  - key: X-Api-Key\n    rate_limit: {unit: minute, requests_per_unit: 1}\n", 0,
			`edge.yaml:4: warning: gateway: routes[0].descriptors[0]: no rule of domain edge has the keys [X-Key]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, file := writeConfig(t, tc.body)
			var out, errb bytes.Buffer
			code := run(context.Background(), []string{"validate", file}, &out, &errb)
			if code != tc.code || !strings.Contains(errb.String(), file[:len(file)-len("edge.yaml")]+tc.want) {
				t.Errorf("exit %d, stderr %q; want exit %d and %q", code, errb.String(), tc.code, tc.want)
			}
		})
	}
}

// serve --upstream refuses routes it cannot build at the entry's line.
func TestServeRefusesRoutesAtTheirLine(t *testing.T) {
	dir, file := writeConfig(t, userRoute)
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"serve", "--config", dir, "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0",
		"--admin", "127.0.0.1:0", "--upstream", "http://127.0.0.1:1"}, &out, &errb)
	if code != 1 || !strings.Contains(errb.String(), file+":7: gateway: routes[0].descriptors[0].entries[0].source: user needs user_header") {
		t.Errorf("exit %d, stderr %q", code, errb.String())
	}
}

var addrOf = regexp.MustCompile(`(http|decision_apis)=(127\.0\.0\.1:\d+)`)

// In gateway mode --http is the proxy only: /json and /v1/decide reach the
// upstream; the decision APIs answer on --api.
func TestServeGatewayAPIsApart(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "upstream %s %s", r.Method, r.URL.RequestURI())
	}))
	defer up.Close()
	dir := gatewayConfigDir(t)
	_, errb, stop := startServe(t, "--config", dir, "--reload-interval", "0", "--upstream", up.URL, "--api", "127.0.0.1:0")
	defer stop()
	addrs := map[string]string{}
	for _, m := range addrOf.FindAllStringSubmatch(errb.String(), -1) {
		addrs[m[1]] = m[2]
	}
	if addrs["http"] == "" || addrs["decision_apis"] == "" {
		t.Fatalf("startup log lacks the addresses: %s", errb.String())
	}
	post := func(url, body string) (int, string) {
		resp, err := http.Post(url, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	req := `{"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"127.0.0.5"}]}]}`
	for _, p := range []string{"/json", "/v1/decide"} {
		if code, body := post("http://"+addrs["http"]+p, req); code != 200 || body != "upstream POST "+p {
			t.Errorf("--http %s: %d %q, want the upstream's answer", p, code, body)
		}
	}
	if code, body := post("http://"+addrs["decision_apis"]+"/json", req); code != 200 || !strings.Contains(body, `"overallCode":"OK"`) {
		t.Errorf("--api /json: %d %q, want the decision", code, body)
	}
	// Not cleaned nor redirected as a ServeMux would (a leading "//" goes
	// with one "/": package gateway's TestPathReadAsMatched).
	for _, p := range []string{"/x//hello", "/a/../b"} {
		r, _ := http.NewRequest("POST", "http://"+addrs["http"]+p, nil)
		resp, err := http.DefaultTransport.RoundTrip(r)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(b) != "upstream POST "+p {
			t.Errorf("POST %s: %d %q, want it proxied as received", p, resp.StatusCode, b)
		}
	}
}

// Without --api the decision APIs are off in gateway mode, and serve says
// so; --api without --upstream is refused.
func TestServeAPIFlag(t *testing.T) {
	dir := gatewayConfigDir(t)
	_, errb, stop := startServe(t, "--config", dir, "--reload-interval", "0", "--upstream", "http://127.0.0.1:1")
	stop()
	if !strings.Contains(errb.String(), `decision_apis="off (set --api ADDR to serve them)"`) {
		t.Errorf("startup log %q: want the APIs off", errb.String())
	}
	var out, eb bytes.Buffer
	if code := run(context.Background(), []string{"serve", "--api", "127.0.0.1:0"}, &out, &eb); code != 1 ||
		!strings.Contains(eb.String(), "--api 127.0.0.1:0: only with --upstream") {
		t.Errorf("--api alone: exit %d %q", code, eb.String())
	}
}

// A hot reload whose routes do not build keeps the previous rules and
// routes, and says why once, at reload time.
func TestServeReloadAllOrNothing(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer up.Close()
	dir := gatewayConfigDir(t)
	_, errb, stop := startServe(t, "--config", dir, "--reload-interval", "100ms", "--upstream", up.URL, "--api", "127.0.0.1:0")
	defer stop()
	var apiAddr string
	for _, m := range addrOf.FindAllStringSubmatch(errb.String(), -1) {
		if m[1] == "decision_apis" {
			apiAddr = m[2]
		}
	}
	// The new file limits "user" at 1/minute beside a route that cannot
	// build (no user_header): none of it may apply.
	bad := "domain: edge\ngateway:\n  routes:\n    - path_prefix: /ping\n      descriptors:\n        - entries:\n            - source: user\n" +
		"descriptors:\n  - key: remote_address\n    rate_limit: {unit: second, requests_per_unit: 1}\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 1}\n"
	deadline := time.Now().Add(10 * time.Second)
	// Written aside and renamed in, so that the watcher never reads half a file.
	tmp := filepath.Join(t.TempDir(), "edge.yaml")
	if err := os.WriteFile(tmp, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "edge.yaml")); err != nil {
		t.Fatal(err)
	}
	for !strings.Contains(errb.String(), "configuration not reloaded") {
		if time.Now().After(deadline) {
			t.Fatalf("no reload failure logged within 10s: %s", errb.String())
		}
		time.Sleep(50 * time.Millisecond) // waiting for the watcher, a real process's timing
	}
	time.Sleep(300 * time.Millisecond) // three more intervals: nothing more is logged
	if !strings.Contains(errb.String(), "edge.yaml:7: gateway: routes[0].descriptors[0].entries[0].source: user needs user_header") {
		t.Errorf("reload log %q: want the entry's line", errb.String())
	}
	// The rules in force are still the old ones: 10/s on remote_address.
	resp, err := http.Post("http://"+apiAddr+"/json", "application/json",
		strings.NewReader(`{"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"x"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), `"requestsPerUnit":10`) {
		t.Errorf("rules after the refused reload: %s, want the previous 10/s", b)
	}
	if strings.Count(errb.String(), "user needs user_header") != 1 {
		t.Errorf("the refused reload is logged %d times, want once: %s", strings.Count(errb.String(), "user needs user_header"), errb.String())
	}
}

// hostRoute's limit is 1 a day: a fixed window on serve's clock, whose end
// between TestHostRouteNeedsPreserveHost's two requests would admit the
// second.
const hostRoute = `domain: edge
gateway:
  routes:
    - path_prefix: /ping
      host: api.example.com
      descriptors: [{entries: [{source: remote_address}]}]
descriptors:
  - key: remote_address
    rate_limit: {unit: day, requests_per_unit: 1}
`

// A route with a host is refused unless the client's Host goes to the
// upstream (--preserve-host): otherwise another Host would skip it while the
// upstream serves the same path. validate checks it as serve does.
func TestHostRouteNeedsPreserveHost(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintf(w, "host=%s", r.Host) }))
	defer up.Close()
	dir, file := writeConfig(t, hostRoute)
	const want = ":5: gateway: routes[0].host: a route with a host needs the client's Host passed to the upstream (floodgate serve --preserve-host"
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"validate", file}, &out, &errb); code != 1 || !strings.Contains(errb.String(), file+want) {
		t.Errorf("validate: exit %d, stderr %q; want exit 1 and %q", code, errb.String(), want)
	}
	out.Reset()
	errb.Reset()
	if code := run(context.Background(), []string{"validate", "--preserve-host", file}, &out, &errb); code != 0 {
		t.Errorf("validate --preserve-host: exit %d, stderr %q", code, errb.String())
	}
	errb.Reset()
	code := run(context.Background(), []string{"serve", "--config", dir, "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0",
		"--admin", "127.0.0.1:0", "--upstream", up.URL}, &out, &errb)
	if code != 1 || !strings.Contains(errb.String(), file+want) {
		t.Errorf("serve without --preserve-host: exit %d, stderr %q", code, errb.String())
	}
	_, serr, stop := startServe(t, "--config", dir, "--reload-interval", "0", "--upstream", up.URL, "--preserve-host", "--client-timeout", "5s")
	defer stop()
	if !strings.Contains(serr.String(), "client_timeout=5s preserve_host=true") {
		t.Errorf("startup log %q: want the client timeout and preserve_host", serr.String())
	}
	var httpAddr string
	for _, m := range addrOf.FindAllStringSubmatch(serr.String(), -1) {
		if m[1] == "http" {
			httpAddr = m[2]
		}
	}
	for i, wantStatus := range []int{200, 429} {
		req, _ := http.NewRequest("GET", "http://"+httpAddr+"/ping", nil)
		req.Host = "api.example.com"
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != wantStatus || wantStatus == 200 && string(b) != "host=api.example.com" {
			t.Errorf("request %d: %d %q, want %d and the client's Host upstream", i, resp.StatusCode, b, wantStatus)
		}
	}
}

// serve --upstream logs the routes no rule limits, as validate warns of
// them: their requests pass unlimited.
func TestServeWarnsOfUnlimitedRoutes(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "edge.yaml")
	cfg := `domain: edge
gateway:
  routes:
    - path_prefix: /typo
      descriptors:
        - entries: [{source: "header:X-Api-Key"}]
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 10}
`
	if err := os.WriteFile(file, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	_, errb, stop := startServe(t, "--config", file, "--upstream", "http://127.0.0.1:1")
	defer stop()
	want := fmt.Sprintf(`level=WARN msg="configuration: %s:6: gateway: routes[0].descriptors[0]: no rule of domain edge has the keys [X-Api-Key]`, file)
	if !strings.Contains(errb.String(), want) {
		t.Fatalf("no warning %q:\n%s", want, errb.String())
	}
}
