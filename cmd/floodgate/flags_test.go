package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestServeFlagHints: a command-line value the flag package cannot parse
// gets the hint a FLOODGATE_* variable gets; --store's help names the
// memory store's key cap.
func TestServeFlagHints(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--store-timeout", "5"}, `invalid value "5" for flag -store-timeout: parse error; want a duration such as 500ms, 5s or 1m30s (the unit is required)`},
		{[]string{"serve", "--shadow=yes"}, `invalid boolean value "yes" for -shadow: parse error; want true or false`},
		{[]string{"serve", "--instances", "many"}, `parse error; want an integer, e.g. 1`},
		{[]string{"serve", "--log-format", "xml"}, `--log-format "xml": want text or json`},
		{[]string{"serve", "--shutdown-delay", "-1s"}, `--shutdown-delay -1s: must be >= 0`},
		{[]string{"serve", "--grpc-max-connection-age-grace", "1s"}, `--grpc-max-connection-age-grace 1s: only with --grpc-max-connection-age`},
	} {
		var out, errb bytes.Buffer
		if code := run(context.Background(), tc.args, &out, &errb); code == 0 || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want it to say %q", tc.args, code, errb.String(), tc.want)
		}
	}
	var out, errb bytes.Buffer
	run(context.Background(), []string{"serve", "-h"}, &out, &errb)
	if !strings.Contains(out.String(), "memory://?max_keys=N") {
		t.Errorf("serve -h does not name memory://?max_keys=N:\n%s", out.String())
	}
}

// TestServeTokenFiles: --admin-token-file and --observe-token-file read a
// mounted Secret's token (without its trailing newline); a missing or
// empty file, or a token given both ways, stops the start naming the flag.
func TestServeTokenFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	adm, obs, empty := write("admin", "s3cret\n"), write("observe", "obs-tok\r\n"), write("empty", "\n")
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"--admin-token-file", filepath.Join(dir, "none")}, nil, "--admin-token-file " + filepath.Join(dir, "none") + ": no such file or directory"},
		{[]string{"--observe-token-file", empty}, nil, "--observe-token-file " + empty + ": the file holds no token"},
		{[]string{"--admin-token", "x", "--admin-token-file", adm}, nil, "--admin-token and --admin-token-file are both set"},
		{[]string{"--admin-token-file", adm}, map[string]string{"FLOODGATE_ADMIN_TOKEN": "y"}, "FLOODGATE_ADMIN_TOKEN and --admin-token-file are both set"},
		{nil, map[string]string{"FLOODGATE_OBSERVE_TOKEN_FILE": empty}, `FLOODGATE_OBSERVE_TOKEN_FILE="` + empty + `": the file holds no token`},
	} {
		for k, v := range tc.env {
			t.Setenv(k, v)
		}
		var out, errb bytes.Buffer
		args := append([]string{"serve", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--admin", "127.0.0.1:0"}, tc.args...)
		if code := run(context.Background(), args, &out, &errb); code != 1 || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("%v %v: exit %d, stderr %q; want 1 saying %q", tc.args, tc.env, code, errb.String(), tc.want)
		}
		for k := range tc.env {
			t.Setenv(k, "")
		}
	}

	dirCfg, _ := writeConfig(t, observeConfig)
	out, errb, stop := startServe(t, "--config", dirCfg, "--admin-token-file", adm, "--observe-token-file", obs)
	defer func() {
		if code := stop(); code != 0 {
			t.Errorf("exit %d: %s", code, errb.String())
		}
	}()
	httpAddr, _, adminAddr := serveAddrs(t, out.String())
	if code, body := observe(t, "http://"+httpAddr+"/v1/observe", "obs-tok"); code != 204 {
		t.Errorf("/v1/observe with the token of --observe-token-file: %d %s", code, body)
	}
	if code, body := observe(t, "http://"+adminAddr+"/admin/api/observe", "s3cret"); code != 204 {
		t.Errorf("/admin/api/observe with the token of --admin-token-file: %d %s", code, body)
	}
	if code, _ := observe(t, "http://"+adminAddr+"/admin/api/observe", "s3cret\n"[:6]+"x"); code != 401 {
		t.Errorf("/admin/api/observe with another token: %d, want 401", code)
	}
}

// TestServeStartWarnings: a FLOODGATE_* variable that names no flag is a
// WARN naming the nearest flag; --log-format json writes one JSON object a
// line. (An admin address off the loopback: TestLoopbackAddr.)
func TestServeStartWarnings(t *testing.T) {
	t.Setenv("FLOODGATE_ON_STORE_EROR", "closed")
	dirCfg, _ := writeConfig(t, observeConfig)
	_, errb, stop := startServe(t, "--config", dirCfg, "--log-format", "json")
	if code := stop(); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var warns []string
	for _, line := range strings.Split(strings.TrimSpace(errb.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("--log-format json: a line that is not JSON: %q", line)
		}
		if rec["level"] == "WARN" {
			warns = append(warns, rec["msg"].(string))
		}
	}
	want := []string{
		"environment variable FLOODGATE_ON_STORE_EROR is not a setting of floodgate serve and is ignored (did you mean FLOODGATE_ON_STORE_ERROR, --on-store-error?)",
	}
	if strings.Join(warns, "\n") != strings.Join(want, "\n") {
		t.Errorf("warnings:\n%s\nwant:\n%s", strings.Join(warns, "\n"), strings.Join(want, "\n"))
	}
}

// TestServeWaitReplicasOpenWarning: wait_replicas under the open failure
// policy admits what the replicas did not acknowledge; serve says so at
// start (the store is down here: --start-degraded, a refused port).
func TestServeWaitReplicasOpenWarning(t *testing.T) {
	dirCfg, _ := writeConfig(t, observeConfig)
	for _, tc := range []struct {
		policy string
		warned bool
	}{{"open", true}, {"closed", false}, {"local", false}} {
		_, errb, stop := startServe(t, "--config", dirCfg, "--store", "redis://127.0.0.1:1?wait_replicas=1&wait_timeout=10ms",
			"--store-timeout", "110ms", "--start-degraded", "--on-store-error", tc.policy)
		if code := stop(); code != 0 {
			t.Fatalf("exit %d: %s", code, errb.String())
		}
		if got := strings.Contains(errb.String(), "--store has wait_replicas but --on-store-error is open"); got != tc.warned {
			t.Errorf("--on-store-error %s: warned %v, want %v:\n%s", tc.policy, got, tc.warned, errb.String())
		}
	}
	// Given by the environment, the settings are named as they were set.
	t.Setenv("FLOODGATE_STORE", "redis-cluster://127.0.0.1:1?wait_replicas=1&wait_timeout=10ms")
	t.Setenv("FLOODGATE_ON_STORE_ERROR", "open")
	_, errb, stop := startServe(t, "--config", dirCfg, "--store-timeout", "110ms", "--start-degraded")
	if code := stop(); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if want := "FLOODGATE_STORE has wait_replicas but FLOODGATE_ON_STORE_ERROR is open: a decision whose writes the replicas did not acknowledge is admitted all the same (set FLOODGATE_ON_STORE_ERROR closed, local or unavailable)"; !strings.Contains(errb.String(), want) {
		t.Errorf("with the environment's settings, no %q:\n%s", want, errb.String())
	}
}

// TestLoopbackAddr: serve warns of an admin address without a token unless
// it listens on the loopback only.
func TestLoopbackAddr(t *testing.T) {
	for addr, want := range map[string]bool{"127.0.0.1:9090": true, "[::1]:9090": true, "127.0.0.2:1": true,
		"0.0.0.0:9090": false, "[::]:9090": false, "10.0.0.5:9090": false, "[::ffff:127.0.0.1]:9090": true} {
		if got := loopbackAddr(addr); got != want {
			t.Errorf("loopbackAddr(%q) = %v, want %v", addr, got, want)
		}
	}
}
