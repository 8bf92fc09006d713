package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// get answers GET url with the bearer token tok: the status code.
func getWithToken(t *testing.T, url, tok string) int {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestServeTokenFileWhitespace: a token file's surrounding whitespace is
// dropped, so the token a client sends matches (HTTP trims the field's
// whitespace, so "secret " could never). Before, only \r\n was dropped:
// the admin API answered 401 to every caller.
func TestServeTokenFileWhitespace(t *testing.T) {
	adm := filepath.Join(t.TempDir(), "admin")
	if err := os.WriteFile(adm, []byte(" secret\t \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, errb, stop := startServe(t, "--admin-token-file", adm, "--reload-interval", "0")
	defer func() {
		if code := stop(); code != 0 {
			t.Errorf("exit %d: %s", code, errb.String())
		}
	}()
	_, _, adminAddr := serveAddrs(t, out.String())
	if code := getWithToken(t, "http://"+adminAddr+"/admin/api/overrides", "secret"); code != 200 {
		t.Errorf("the admin API with the token of a file holding %q: %d, want 200", " secret\t \n", code)
	}
	if strings.Contains(errb.String(), "token file is readable") {
		t.Errorf("a 0600 token file warned of its mode: %s", errb.String())
	}
}

// TestServeRefusesUnusableTokens: a token that holds whitespace or a
// control character, or only whitespace, stops the start — from a flag,
// a variable or a file — naming where it came from and never the token.
func TestServeRefusesUnusableTokens(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	inner, ctl, blank := write("inner", "sec ret\n"), write("ctl", "sec\x00ret\n"), write("blank", " \t\r\n")
	const hint = "the token holds whitespace or a control character"
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"--admin-token-file", inner}, nil, "--admin-token-file " + inner + ": " + hint + " (byte 4 after trimming)"},
		{[]string{"--observe-token-file", ctl}, nil, "--observe-token-file " + ctl + ": " + hint},
		{[]string{"--admin-token-file", blank}, nil, "--admin-token-file " + blank + ": the file holds no token"},
		{[]string{"--admin-token", "sec ret"}, nil, "floodgate serve: --admin-token: " + hint},
		{[]string{"--observe-token", "sec\tret"}, nil, "floodgate serve: --observe-token: " + hint},
		{[]string{"--admin-token", "  "}, nil, "floodgate serve: --admin-token: the token is empty or only whitespace"},
		// --admin-token "$TOKEN" with TOKEN unset: no token at all, while
		// one of spaces was refused.
		{[]string{"--admin-token", ""}, nil, "floodgate serve: --admin-token: the token is empty (an unset shell variable, as in --admin-token \"$TOKEN\"?): give a token, or leave the flag out for none"},
		{[]string{"--observe-token="}, nil, "floodgate serve: --observe-token: the token is empty"},
		{nil, map[string]string{"FLOODGATE_OBSERVE_TOKEN": "sec\x7fret"}, "floodgate serve: FLOODGATE_OBSERVE_TOKEN: " + hint},
		{nil, map[string]string{"FLOODGATE_ADMIN_TOKEN_FILE": inner}, `FLOODGATE_ADMIN_TOKEN_FILE="` + inner + `": ` + hint},
	} {
		for k, v := range tc.env {
			t.Setenv(k, v)
		}
		var out, errb bytes.Buffer
		args := append([]string{"serve", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--admin", "127.0.0.1:0"}, tc.args...)
		// A token taken by mistake would serve: the timeout ends it (exit 0).
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		code := run(ctx, args, &out, &errb)
		cancel()
		if code != 1 || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("%q %q: exit %d, stderr %q; want 1 saying %q", tc.args, tc.env, code, errb.String(), tc.want)
		}
		if strings.Contains(errb.String(), "sec") && !strings.Contains(tc.want, "sec") {
			t.Errorf("%q %q: the error shows the token: %q", tc.args, tc.env, errb.String())
		}
		for k := range tc.env {
			t.Setenv(k, "")
		}
	}
	// Surrounding whitespace of a flag's token is dropped as a file's is.
	var f serveFlags
	f.adminToken, f.observeToken = " tok\n", "obs"
	if _, err := f.readTokens(); err != nil || f.adminToken != "tok" || f.observeToken != "obs" {
		t.Errorf("readTokens: %v, admin %q, observe %q; want tok, obs", err, f.adminToken, f.observeToken)
	}
}

// TestServeWarnsReadableTokenFile: a token file every user may read is a
// WARN naming the file (the token still works); a group-readable one, as
// the kubelet makes a Secret under a pod fsGroup (0440), is not.
func TestServeWarnsReadableTokenFile(t *testing.T) {
	for _, tc := range []struct {
		mode os.FileMode
		warn bool
	}{{0o644, true}, {0o604, true}, {0o440, false}, {0o600, false}} {
		obs := filepath.Join(t.TempDir(), "observe")
		if err := os.WriteFile(obs, []byte("obs-tok\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(obs, tc.mode); err != nil { // not through the umask
			t.Fatal(err)
		}
		_, errb, stop := startServe(t, "--observe-token-file", obs, "--reload-interval", "0")
		if code := stop(); code != 0 {
			t.Fatalf("mode %04o: exit %d: %s", tc.mode, code, errb.String())
		}
		want := fmt.Sprintf(`level=WARN msg="--observe-token-file %s: other users have access to the token file (mode %04o)`, obs, tc.mode)
		if got := strings.Contains(errb.String(), "have access to the token file"); got != tc.warn || (tc.warn && !strings.Contains(errb.String(), want)) {
			t.Errorf("mode %04o: want a WARN %v (%q) in:\n%s", tc.mode, tc.warn, want, errb.String())
		}
	}
}

// adaptiveConfig has one adaptive rule, edge/per-user.
const adaptiveConfig = `domain: edge
descriptors:
  - key: user
    rate_limit:
      name: per-user
      unit: second
      requests_per_unit: 100
      adaptive: {min: 0.2, max: 1, latency_threshold: 250ms}
`

// TestServeWarnsObserveOpen: adaptive rules with neither --observe-token
// nor --admin-token are a WARN at start, saying that loopback peers — a
// sidecar forwarding external callers among them — can steer the limits;
// a reload that adds an adaptive rule warns again, naming it. With a
// token, or no adaptive rule, there is no such WARN.
func TestServeWarnsObserveOpen(t *testing.T) {
	const warn = "adaptive rules are configured and neither --observe-token nor --admin-token is set: POST /v1/observe takes samples from any loopback peer, including a sidecar"
	for _, tc := range []struct {
		name   string
		config string
		args   []string
		want   bool
	}{
		{"adaptive, no token", adaptiveConfig, nil, true},
		{"adaptive, observe token", adaptiveConfig, []string{"--observe-token", "obs"}, false},
		{"adaptive, admin token", adaptiveConfig, []string{"--admin-token", "adm"}, false},
		{"no adaptive rule", observeConfig, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, _ := writeConfig(t, tc.config)
			_, errb, stop := startServe(t, append([]string{"--config", dir, "--reload-interval", "0"}, tc.args...)...)
			if code := stop(); code != 0 {
				t.Fatalf("exit %d: %s", code, errb.String())
			}
			if got := strings.Contains(errb.String(), `level=WARN msg="`+warn); got != tc.want {
				t.Errorf("WARN %q: %v, want %v:\n%s", warn, got, tc.want, errb.String())
			}
			if tc.want && !strings.Contains(errb.String(), "rules=edge/per-user") {
				t.Errorf("the WARN does not name the rule edge/per-user:\n%s", errb.String())
			}
		})
	}

	t.Run("reload adds one", func(t *testing.T) {
		dir, file := writeConfig(t, observeConfig)
		_, errb, stop := startServe(t, "--config", dir, "--reload-interval", "100ms")
		defer stop()
		if strings.Contains(errb.String(), warn) {
			t.Fatalf("warned before any adaptive rule:\n%s", errb.String())
		}
		if err := os.WriteFile(file, []byte(adaptiveConfig), 0o644); err != nil {
			t.Fatal(err)
		}
		// The WARN follows the reload's own line, and a poll may first
		// catch the file half written: wait for the WARN itself.
		deadline := time.Now().Add(10 * time.Second)
		for !strings.Contains(errb.String(), warn) || !strings.Contains(errb.String(), "(rules edge/per-user)") {
			if time.Now().After(deadline) {
				t.Fatalf("a reload that adds an adaptive rule without a token: no WARN naming it within 10s:\n%s", errb.String())
			}
			time.Sleep(20 * time.Millisecond) // waiting for the watcher of a running server
		}
	})
}
