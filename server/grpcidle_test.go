package server_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/floodgate/floodgate/server"
	"github.com/floodgate/floodgate/store/memory"
)

// endedConn is a client's TCP connection that records when reading it
// failed: the server closed it (or the client did, after the server's
// GOAWAY).
type endedConn struct {
	net.Conn
	once  sync.Once
	at    time.Time // when, once ended is closed
	ended chan struct{}
}

func (c *endedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if err != nil {
		c.once.Do(func() {
			c.at = time.Now()
			close(c.ended)
		})
	}
	return n, err
}

// watchedClient is a real gRPC client of addr whose connections are
// endedConns, counted as they are dialled.
type watchedClient struct {
	conn  *grpc.ClientConn
	rls   rlsv3.RateLimitServiceClient
	dials atomic.Int32
	mu    sync.Mutex
	conns []*endedConn
}

func newWatchedClient(t *testing.T, addr string) *watchedClient {
	t.Helper()
	c := &watchedClient{}
	dial := func(ctx context.Context, addr string) (net.Conn, error) {
		nc, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		ec := &endedConn{Conn: nc, ended: make(chan struct{})}
		c.dials.Add(1)
		c.mu.Lock()
		c.conns = append(c.conns, ec)
		c.mu.Unlock()
		return ec, nil
	}
	var err error
	c.conn, err = grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithContextDialer(dial))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.conn.Close() })
	c.rls = rlsv3.NewRateLimitServiceClient(c.conn)
	return c
}

// first is the first connection the client dialled.
func (c *watchedClient) first() *endedConn {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.conns[0]
}

func (c *watchedClient) call(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.rls.ShouldRateLimit(ctx, envoyReq("internal", 1, []string{"ldap", "x"})); err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
}

// TestGRPCMaxConnectionIdle: with WithGRPCMaxConnectionIdle(idle), a real
// client's connection that carries no call is closed once idle has passed
// since its last call, not before; one whose calls keep coming, and one
// with a call in flight all along (a health Watch), stay open on their
// first connection however long that lasts.
func TestGRPCMaxConnectionIdle(t *testing.T) {
	const idle = 400 * time.Millisecond
	e := newEnv(t, server.WithGRPCMaxConnectionIdle(idle))
	addr := e.conn.Target()

	quiet, busy, watching := newWatchedClient(t, addr), newWatchedClient(t, addr), newWatchedClient(t, addr)
	quiet.call(t)
	last := time.Now()
	busy.call(t)
	wctx, wcancel := context.WithCancel(context.Background())
	defer wcancel()
	w, err := healthpb.NewHealthClient(watching.conn).Watch(wctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Recv(); err != nil {
		t.Fatalf("health Watch: %v", err)
	}

	// The busy client calls every 20ms, for three idle periods and until
	// the quiet connection has ended (bounded: 10s).
	stop := time.Now().Add(3 * idle)
	for time.Now().Before(stop) {
		busy.call(t)
		time.Sleep(20 * time.Millisecond)
	}
	select {
	case <-quiet.first().ended:
	case <-time.After(10 * time.Second):
		t.Fatalf("the idle connection still open %v after its last call (max idle %v)", time.Since(last), idle)
	}
	after := quiet.first().at.Sub(last)
	if after < idle-50*time.Millisecond {
		t.Errorf("the idle connection ended %v after its last call, before max idle %v", after, idle)
	}
	t.Logf("the idle connection ended %v after its last call (max idle %v)", after, idle)
	for name, c := range map[string]*watchedClient{"busy": busy, "watching": watching} {
		select {
		case <-c.first().ended:
			t.Errorf("the %s connection was closed", name)
		default:
		}
		if n := c.dials.Load(); n != 1 {
			t.Errorf("the %s client dialled %d connections, want 1", name, n)
		}
	}
	// The quiet client reconnects for its next call, as Envoy does after
	// a GOAWAY.
	quiet.call(t)
	if n := quiet.dials.Load(); n != 2 {
		t.Errorf("the quiet client dialled %d connections after its idle one closed, want 2", n)
	}
}

// TestGRPCMaxConnectionIdleOption: a negative duration is refused, 0
// (no bound) accepted.
func TestGRPCMaxConnectionIdleOption(t *testing.T) {
	st, err := memory.New(memory.WithSweepInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	e := newEnv(t)
	if _, err := server.New(e.eng, st, server.WithGRPCMaxConnectionIdle(-time.Second)); err == nil {
		t.Error("WithGRPCMaxConnectionIdle(-1s): no error")
	}
	if _, err := server.New(e.eng, st, server.WithGRPCMaxConnectionIdle(0)); err != nil {
		t.Errorf("WithGRPCMaxConnectionIdle(0): %v", err)
	}
}

// h2Ping is HTTP/2's PING frame; h2EnhanceYourCalm the GOAWAY code of a
// peer that sends too many.
const (
	h2Ping            = 0x6
	h2EnhanceYourCalm = 0xb
)

// h2Conn opens an HTTP/2 connection to addr by hand and exchanges the
// SETTINGS, as a client that sends only pings would.
func h2Conn(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.WriteString(c, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	if err := writeFrame(c, h2Settings, 0, 0, nil); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	for {
		typ, flags, _, _, err := readFrame(br)
		if err != nil {
			t.Fatalf("reading the server's SETTINGS: %v", err)
		}
		if typ == h2Settings && flags&h2Ack == 0 {
			if err := writeFrame(c, h2Settings, h2Ack, 0, nil); err != nil {
				t.Fatal(err)
			}
			return c, br
		}
	}
}

// goAway reads frames until a GOAWAY and returns its code, its debug data
// and how many PING ACKs came before it.
func goAway(t *testing.T, br *bufio.Reader) (code uint32, debug string, acks int) {
	t.Helper()
	for {
		typ, flags, _, p, err := readFrame(br)
		if err != nil {
			t.Fatalf("after %d ping acks, no GOAWAY: %v", acks, err)
		}
		switch {
		case typ == h2Ping && flags&h2Ack != 0:
			acks++
		case typ == h2GoAway && len(p) >= 8:
			return binary.BigEndian.Uint32(p[4:]), string(p[8:]), acks
		}
	}
}

// TestGRPCKeepalivePings: a client that pings no more often than the
// server's minimum (here 100ms; 10s in production, gRPC clients' least
// keepalive time), with no call in flight — Envoy's connection_keepalive
// on a quiet connection — gets its pings answered rather than GOAWAY
// ENHANCE_YOUR_CALM "too_many_pings" (grpc-go's default policy sends it
// at the third ping within 2 hours on a connection without calls), and
// the pings do not make the connection busy: it is closed as idle (GOAWAY
// NO_ERROR "max_idle") once the idle bound passes. A client that pings
// faster than the minimum still gets "too_many_pings".
func TestGRPCKeepalivePings(t *testing.T) {
	defer server.SetGRPCPingMinTime(100 * time.Millisecond)()
	const idle = time.Second
	e := newEnv(t, server.WithGRPCMaxConnectionIdle(idle))

	c, br := h2Conn(t, e.conn.Target())
	start := time.Now()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := uint64(0); ; i++ {
			var p [8]byte
			binary.BigEndian.PutUint64(p[:], i)
			if writeFrame(c, h2Ping, 0, 0, p[:]) != nil {
				return
			}
			time.Sleep(150 * time.Millisecond)
		}
	}()
	code, debug, acks := goAway(t, br)
	if code == h2EnhanceYourCalm || debug != "max_idle" {
		t.Fatalf("pinged every 150ms without a call: GOAWAY code %#x %q after %d acks and %v, want NO_ERROR \"max_idle\" once idle %v passed",
			code, debug, acks, time.Since(start), idle)
	}
	if at := time.Since(start); at < idle-50*time.Millisecond || acks < 5 {
		t.Errorf("closed as idle after %v and %d ping acks, want after %v with its pings answered", at, acks, idle)
	}
	c.Close()
	<-done

	flood, fbr := h2Conn(t, e.conn.Target())
	for i := range 10 {
		var p [8]byte
		binary.BigEndian.PutUint64(p[:], uint64(i))
		if err := writeFrame(flood, h2Ping, 0, 0, p[:]); err != nil {
			t.Fatal(err)
		}
	}
	if code, debug, _ := goAway(t, fbr); code != h2EnhanceYourCalm || debug != "too_many_pings" {
		t.Errorf("10 pings at once: GOAWAY code %#x %q, want ENHANCE_YOUR_CALM \"too_many_pings\"", code, debug)
	}
}
