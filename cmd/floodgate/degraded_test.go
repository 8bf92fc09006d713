package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/floodgate/floodgate/internal/testserver"
)

// degradedConfig is a configuration with one limit, 4 a day per user: a
// fixed window (the default algorithm) on a real clock, whose end between
// two of a test's decisions would change their statuses.
func degradedConfig(t *testing.T) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "api.yaml")
	cfg := "domain: api\ndescriptors:\n  - key: user\n    rate_limit:\n      unit: day\n      requests_per_unit: 4\n"
	if err := os.WriteFile(file, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

// decide posts a /json request for user to the HTTP address and returns
// its status.
func decide(t *testing.T, httpAddr, user string) int {
	t.Helper()
	body := `{"domain":"api","descriptors":[{"entries":[{"key":"user","value":"` + user + `"}]}]}`
	resp, err := http.Post("http://"+httpAddr+"/json", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// statuses decides n times for user.
func statuses(t *testing.T, httpAddr, user string, n int) []int {
	var got []int
	for range n {
		got = append(got, decide(t, httpAddr, user))
	}
	return got
}

// storeDecides waits, 15 s at most, until a /v1/decide (for a user of its
// own) is answered by the store, not by --on-store-error (store_fallback).
func storeDecides(t *testing.T, httpAddr string, errb *lockedBuffer) {
	t.Helper()
	body := `{"domain":"api","descriptors":[{"entries":[{"key":"user","value":"breaker-probe"}]}]}`
	deadline := time.Now().Add(15 * time.Second)
	for {
		resp, err := http.Post("http://"+httpAddr+"/v1/decide", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		var v struct {
			StoreFallback bool `json:"store_fallback"`
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err := json.Unmarshal(b, &v); err != nil || resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("/v1/decide: %d %q: %v", resp.StatusCode, b, err)
		}
		if !v.StoreFallback {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("/v1/decide still answered by the failure policy 15s after /readyz said ready: %d %s; %s", resp.StatusCode, b, errb.String())
		}
		time.Sleep(50 * time.Millisecond) // waiting for the breaker's cool-down and its probe
	}
}

func readyz(t *testing.T, adminAddr string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + adminAddr + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// With --start-degraded, a Redis down at start: serve starts, --on-store-error
// local answers within the local bound, /readyz is 503 and gRPC health
// SERVING; once Redis is up, serve opens it, is ready, and decides on it
// (the counts are in Redis, shared by the fleet).
func TestServeStartDegraded(t *testing.T) {
	rs := testserver.NewRedis(t)
	if err := rs.Kill(); err != nil {
		t.Fatal(err)
	}
	out, errb, stop := startServe(t, "--config", degradedConfig(t), "--reload-interval", "0", "--store", "redis://"+rs.Addr,
		"--start-degraded", "--on-store-error", "local", "--instances", "2", "--store-timeout", "2s")
	defer func() {
		if code := stop(); code != 0 {
			t.Errorf("serve exit %d after cancel: %s", code, errb.String())
		}
	}()
	m := regexp.MustCompile(`http (\S+), grpc (\S+), admin (\S+) `).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("no addresses in serve's stdout %q", out.String())
	}
	httpAddr, grpcAddr, adminAddr := m[1], m[2], m[3]
	if !strings.Contains(errb.String(), "level=WARN msg=\"store not opened at start") {
		t.Errorf("no WARN that the store is not opened: %s", errb.String())
	}

	if code, body := readyz(t, adminAddr); code != http.StatusServiceUnavailable || !strings.Contains(body, "not opened yet") {
		t.Errorf("/readyz with the store down: %d %q, want 503 saying the store is not opened yet", code, body)
	}
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	h, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || h.Status != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("gRPC health with the store down: %v %v, want SERVING", h, err)
	}
	// local: 4 a day ÷ 2 instances = 2 here.
	if got := statuses(t, httpAddr, "degraded", 3); !slices.Equal(got, []int{200, 200, 429}) {
		t.Errorf("decisions with the store down, local policy = %v, want [200 200 429]", got)
	}

	if err := rs.Restart(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		code, body := readyz(t, adminAddr)
		if code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz %d %q 15s after the store came back: %s", code, body, errb.String())
		}
		time.Sleep(50 * time.Millisecond) // waiting for the retry loop and the breaker's probe
	}
	if !strings.Contains(errb.String(), `msg="store opened"`) {
		t.Errorf("no INFO that the store opened: %s", errb.String())
	}
	// /readyz says the store answers a ping, asked of the store itself
	// when the breaker's probe timed out (which reopens the breaker for
	// its 1 s cool-down): decisions go to the store after the breaker's
	// next probe, so wait for one the store made.
	storeDecides(t, httpAddr, errb)
	// The store's limit, 4, not the local share. (--store-timeout 2s: at
	// the default 50 ms, a Redis call slowed by a loaded machine would be
	// answered by the local policy.)
	if got := statuses(t, httpAddr, "shared", 5); !slices.Equal(got, []int{200, 200, 200, 200, 429}) {
		t.Errorf("decisions on the store = %v, want [200 200 200 200 429]", got)
	}
	keys, err := testserver.RedisDo(rs.Addr, time.Second, "KEYS", "*shared*")
	if ks, _ := keys.([]any); err != nil || len(ks) == 0 {
		t.Errorf("KEYS *shared* on Redis: %v %v, want the key serve decided on", keys, err)
	}
}

// Without --start-degraded a store down at start stops serve as before;
// with it, what would not pass by itself (a replica, a refused password)
// still does.
func TestServeStartDegradedFatal(t *testing.T) {
	down := testserver.NewRedis(t)
	if err := down.Kill(); err != nil {
		t.Fatal(err)
	}
	master := testserver.NewRedis(t)
	replica := testserver.NewRedis(t, "--replicaof", "127.0.0.1", strconv.Itoa(master.Port))
	if _, err := testserver.RedisDo(master.Addr, time.Second, "ACL", "SETUSER", "floodgate", "on", ">right-password", "~*", "+@all"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"down without the flag", []string{"--store", "redis://" + down.Addr},
			"floodgate serve: --store: redis: connect to redis://" + down.Addr + ": store: unavailable: dial tcp " + down.Addr + ": connect: connection refused" +
				"; to start while the store cannot be reached, set --start-degraded (FLOODGATE_START_DEGRADED=true): --on-store-error open answers and /readyz says not ready until a background retry opens it\n"},
		// No policy answers under unavailable: the hint says what happens.
		{"down without the flag, unavailable", []string{"--store", "redis://" + down.Addr, "--on-store-error", "unavailable"},
			"set --start-degraded (FLOODGATE_START_DEGRADED=true): --on-store-error unavailable fails the decisions (gRPC UNAVAILABLE, HTTP 503) and /readyz says not ready until a background retry opens it\n"},
		{"replica", []string{"--store", "redis://" + replica.Addr, "--start-degraded"}, "is a read-only replica of 127.0.0.1:" + strconv.Itoa(master.Port)},
		{"wrong password", []string{"--store", "redis://floodgate:wrong-password@" + master.Addr, "--start-degraded"}, "WRONGPASS"},
		// Not a store that cannot be reached: --start-degraded would not
		// help, and is not offered.
		{"wrong password without the flag", []string{"--store", "redis://floodgate:wrong-password@" + master.Addr}, "WRONGPASS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			args := append([]string{"serve", "--config", degradedConfig(t), "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--admin", "127.0.0.1:0"}, tc.args...)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if code := run(ctx, args, &out, &errb); code != 1 || !strings.Contains(errb.String(), tc.want) {
				t.Errorf("exit %d, stderr %q; want 1 and %q", code, errb.String(), tc.want)
			}
			if offered := strings.Contains(errb.String(), "set --start-degraded"); offered != strings.HasPrefix(tc.name, "down without the flag") {
				t.Errorf("stderr %q: --start-degraded offered: %v, want it only for a store that cannot be reached", errb.String(), offered)
			}
			if strings.Contains(errb.String(), "wrong-password") {
				t.Errorf("the password is in the error: %s", errb.String())
			}
		})
	}
}
