package main

import (
	"bytes"
	"context"
	"net"
	"strings"
	"testing"
)

// Two of serve's own flags naming one address are refused as a clash,
// naming both, before anything listens: it said only `--admin X: …
// address already in use`, as if another process held the port.
func TestServeAddressClash(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // free: the clash is serve's own
	_, port, _ := net.SplitHostPort(addr)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--http", addr, "--admin", addr, "--grpc", "127.0.0.1:0"}, "--admin " + addr + ": clashes with --http " + addr},
		{[]string{"--http", "127.0.0.1:0", "--grpc", "0.0.0.0:" + port, "--admin", addr}, "--admin " + addr + ": clashes with --grpc 0.0.0.0:" + port},
	} {
		var out, errb bytes.Buffer
		code := run(context.Background(), append([]string{"serve", "--store", "memory://"}, c.args...), &out, &errb)
		if code == 0 || !strings.Contains(errb.String(), c.want) {
			t.Errorf("%q: exit %d, stderr %q; want an error saying %q", c.args, code, errb.String(), c.want)
		}
	}
	if !sameListenAddr("[::]:80", "127.0.0.1:80") || sameListenAddr("127.0.0.1:80", "127.0.0.2:80") || sameListenAddr(":0", ":0") {
		t.Error("sameListenAddr: wrong on every-address, distinct hosts or port 0")
	}
}
