package main

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

const observeConfig = `domain: edge
descriptors:
  - key: user
    rate_limit: {name: per-user, unit: second, requests_per_unit: 100}
`

// observe posts one sample to url with the bearer token tok ("" for none).
func observe(t *testing.T, url, tok string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(`{"domain":"edge","rule":"per-user","latency_ms":5}`))
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestServeObserveToken: POST /v1/observe on --http takes --observe-token
// (FLOODGATE_OBSERVE_TOKEN), else --admin-token; with neither, loopback
// callers only (the handler's tests cover remote peers). The admin address
// takes the samples at /admin/api/observe under the admin token.
func TestServeObserveToken(t *testing.T) {
	dir, _ := writeConfig(t, observeConfig)
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		// tries: token sent on --http, want status; then on admin.
		api   map[string]int
		admin map[string]int
	}{
		{"none", nil, nil, map[string]int{"": 204}, map[string]int{"": 204}},
		{"admin token", []string{"--admin-token", "adm"}, nil, map[string]int{"": 401, "x": 401, "adm": 204}, map[string]int{"": 401, "adm": 204}},
		{"observe token", []string{"--admin-token", "adm"}, map[string]string{"FLOODGATE_OBSERVE_TOKEN": "obs"},
			map[string]int{"": 401, "adm": 401, "obs": 204}, map[string]int{"obs": 401, "adm": 204}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			out, errb, stop := startServe(t, append([]string{"--config", dir}, tc.args...)...)
			defer func() {
				if code := stop(); code != 0 {
					t.Errorf("exit %d: %s", code, errb.String())
				}
			}()
			httpAddr, _, adminAddr := serveAddrs(t, out.String())
			for tok, want := range tc.api {
				if code, body := observe(t, "http://"+httpAddr+"/v1/observe", tok); code != want {
					t.Errorf("/v1/observe with token %q: %d %s, want %d", tok, code, body, want)
				}
			}
			for tok, want := range tc.admin {
				if code, body := observe(t, "http://"+adminAddr+"/admin/api/observe", tok); code != want {
					t.Errorf("/admin/api/observe with token %q: %d %s, want %d", tok, code, body, want)
				}
			}
		})
	}
}
