package server_test

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	rlv3common "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/floodgate/floodgate/server"
)

// rawConns records the TCP connections its listener accepts.
type rawConns struct {
	net.Listener
	mu    sync.Mutex
	conns []*net.TCPConn
}

func (r *rawConns) Accept() (net.Conn, error) {
	c, err := r.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		r.mu.Lock()
		r.conns = append(r.conns, tc)
		r.mu.Unlock()
	}
	return c, err
}

// The gRPC connections keep grpc-go's TCP_USER_TIMEOUT (its keepalive
// timeout, 20 s), bounded or not: grpc-go sets it only on a bare
// *net.TCPConn, and the counting wrapper took it away (a dead Envoy was
// found out after the kernel's retransmissions, 15 minutes). Unbounded,
// the gRPC listener is not wrapped at all.
func TestLimitConnsKeepsGRPCsUserTimeout(t *testing.T) {
	for _, max := range []int{0, 2} {
		srv := serverFor(t, releaseConfig)
		ls, err := server.Listen("127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		rec := &rawConns{Listener: ls.GRPC}
		ls.GRPC = rec
		ls = srv.LimitConns(ls, max)
		if _, wrapped := ls.GRPC.(*server.ConnListener); wrapped != (max > 0) {
			t.Errorf("max %d: the gRPC listener wrapped: %v, want %v", max, wrapped, max > 0)
		}
		serve(t, srv, ls)
		cc, err := grpc.NewClient(rec.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err = rlsv3.NewRateLimitServiceClient(cc).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "jobs",
			Descriptors: []*rlv3common.RateLimitDescriptor{{Entries: []*rlv3common.RateLimitDescriptor_Entry{{Key: "user", Value: "u"}}}}})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		rec.mu.Lock()
		raw, err := rec.conns[0].SyscallConn()
		rec.mu.Unlock()
		if err != nil {
			t.Fatal(err)
		}
		var ms int
		var gerr error
		raw.Control(func(fd uintptr) { ms, gerr = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT) })
		if gerr != nil || ms != 20000 {
			t.Errorf("max %d: the gRPC connection's TCP_USER_TIMEOUT %d ms (%v), want 20000", max, ms, gerr)
		}
		cc.Close()
	}
}
