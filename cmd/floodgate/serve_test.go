package main

import (
	"bytes"
	"context"
	"flag"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestServeBadFlags(t *testing.T) {
	for _, r := range []struct {
		args []string
		env  map[string]string
		code int
		want string
	}{
		{[]string{"serve", "--store", "postgres://db"}, nil, 1, `unknown scheme "postgres"`},
		{[]string{"serve", "--store", "redis://h:99999"}, nil, 1, "floodgate serve: --store redis://h:99999: address \"h:99999\": port must be 1-65535, got \"99999\"\n"},
		{[]string{"serve", "--store", "memcached://h:99999"}, nil, 1, "floodgate serve: --store memcached://h:99999: server 1 \"h:99999\": port must be 1-65535\n"},
		{[]string{"serve", "--store", "redis://u:s3cret@h:1/x"}, nil, 1, "floodgate serve: --store redis://u:xxxxx@h:1/x: database must be a non-negative integer, got \"x\"\n"},
		{[]string{"serve", "--store", "redis-sentinel://h:26379"}, nil, 1, "floodgate serve: --store redis-sentinel://h:26379: missing master name"},
		{[]string{"serve", "--on-store-error", "sometimes"}, nil, 1, `unknown failure policy "sometimes"`},
		{[]string{"serve", "--instances", "0"}, nil, 1, "--instances must be >= 1"},
		{[]string{"serve", "--lease-slice", "1"}, nil, 1, "--lease-slice must be 0 (off) or at least 2, got 1"},
		{[]string{"serve", "--lease-ttl", "0s"}, nil, 1, "--lease-ttl must be > 0, got 0s"},
		{[]string{"serve", "--lease-slice", "10"}, nil, 1, "--lease-slice 10: leases are for remote stores; --store memory:// decides in process already"},
		{[]string{"serve", "--config", "/no/such/config.yaml"}, nil, 1, "/no/such/config.yaml"},
		{[]string{"serve", "extra"}, nil, 2, `unexpected argument "extra"`},
		{[]string{"serve", "--colour"}, nil, 2, "flag provided but not defined"},
		{[]string{"serve"}, map[string]string{"FLOODGATE_ON_STORE_ERROR": "never"}, 1, `unknown failure policy "never"`},
		{[]string{"serve"}, map[string]string{"FLOODGATE_INSTANCES": "many"}, 2, `FLOODGATE_INSTANCES="many": want an integer, e.g. 1`},
		{[]string{"serve"}, map[string]string{"FLOODGATE_DRAIN_TIMEOUT": "x"}, 2, `FLOODGATE_DRAIN_TIMEOUT="x": want a duration such as 500ms, 5s or 1m30s`},
		{[]string{"serve"}, map[string]string{"FLOODGATE_STORE_TIMEOUT": "100"}, 2, `FLOODGATE_STORE_TIMEOUT="100": want a duration such as 500ms, 5s or 1m30s (the unit is required)`},
		{[]string{"serve"}, map[string]string{"FLOODGATE_SHADOW": "yes"}, 2, `FLOODGATE_SHADOW="yes": want true or false`},
	} {
		for k, v := range r.env {
			t.Setenv(k, v)
		}
		var out, errb bytes.Buffer
		code := run(context.Background(), r.args, &out, &errb)
		if code != r.code || !strings.Contains(errb.String(), r.want) {
			t.Errorf("%v %v: exit %d, stderr %q; want exit %d saying %q", r.args, r.env, code, errb.String(), r.code, r.want)
		}
		for k := range r.env {
			t.Setenv(k, "")
		}
	}
}

func TestApplyEnv(t *testing.T) {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	var f serveFlags
	f.register(fs)
	if err := fs.Parse([]string{"--http", "127.0.0.1:1"}); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"FLOODGATE_HTTP": "127.0.0.1:2", "FLOODGATE_STORE": "memcached://m:1", "FLOODGATE_ADMIN_TOKEN": "tok",
		"FLOODGATE_STORE_TIMEOUT": "75ms"}
	if err := applyEnv(fs, func(k string) string { return env[k] }); err != nil {
		t.Fatal(err)
	}
	if f.httpAddr != "127.0.0.1:1" || f.store != "memcached://m:1" || f.adminToken != "tok" || f.storeTimeout != 75*time.Millisecond {
		t.Fatalf("flags after the environment: %+v (the command line must win, the environment fill the rest)", f)
	}
}

// TestServeStopsOnCancel: serve with the defaults (memory store, built-in or
// example config) on free ports, then a cancelled context: exit 0.
func TestServeStopsOnCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var out, errb lockedBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"serve", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--admin", "127.0.0.1:0"}, &out, &errb)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(errb.String(), "floodgate serving") {
		if time.Now().After(deadline) {
			t.Fatalf("not serving after 10s: %s", errb.String())
		}
		time.Sleep(10 * time.Millisecond) // waiting for the server to start, not for math
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit %d after cancel: %s", code, errb.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatal("serve did not stop within 15s of the cancel")
	}
}

// lockedBuffer is a bytes.Buffer safe to read while the server writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
