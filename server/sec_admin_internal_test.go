package server

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestSecLoopbackListener: the listener's own address, as Serve records
// it, decides whether the admin address is on the loopback: an admin
// address bound to 0.0.0.0 is reached over loopback connections too (a
// sidecar, a kubelet probe through a proxy), and those are not held to the
// Host check of a loopback listener; without a record the connection's
// local address decides, and a request with neither is not on one.
func TestSecLoopbackListener(t *testing.T) {
	tcp := func(s string) net.Addr { a, _ := net.ResolveTCPAddr("tcp", s); return a }
	for _, tc := range []struct {
		listen, local net.Addr
		want          bool
	}{
		{tcp("127.0.0.1:9090"), tcp("127.0.0.1:9090"), true},
		{tcp("[::1]:9090"), nil, true},
		{tcp("127.0.0.2:9090"), nil, true},
		{tcp("0.0.0.0:9090"), tcp("127.0.0.1:9090"), false},
		{tcp("[::]:9090"), tcp("[::1]:9090"), false},
		{tcp("10.0.0.5:9090"), nil, false},
		{nil, tcp("127.0.0.1:9090"), true},
		{nil, tcp("10.0.0.5:9090"), false},
		{nil, nil, false},
	} {
		r := httptest.NewRequest("GET", "/metrics", nil)
		ctx := context.Background()
		if tc.listen != nil {
			ctx = context.WithValue(ctx, listenAddrKey{}, tc.listen)
		}
		if tc.local != nil {
			ctx = context.WithValue(ctx, http.LocalAddrContextKey, tc.local)
		}
		if got := loopbackListener(r.WithContext(ctx)); got != tc.want {
			t.Errorf("listener %v, local address %v: loopback listener %v, want %v", tc.listen, tc.local, got, tc.want)
		}
	}
}
