package server

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// A ConnListener counts the connections its listener accepted and has not
// yet seen closed, and, with a bound, holds at most that many open at once.
// While it is full, Accept closes the HTTP connection that has been idle
// longest between two requests (as nginx reuses its idle keep-alive
// connections), when Track says of one, and otherwise waits for one to
// close; the connections that arrive meanwhile wait in the kernel's listen
// backlog (as with golang.org/x/net/netutil.LimitListener), all but the one
// Accept holds while it makes room. A connection is
// counted from its Accept to its first Close; a hijacked one (a websocket)
// stays counted until its new owner closes it.
//
// Wrap the listener that accepts the TCP connections: a TLS listener goes
// around a ConnListener, not under it (net/http and gRPC look for the
// *tls.Conn that Accept returns).
type ConnListener struct {
	net.Listener
	name  string
	slots chan struct{} // nil without a bound
	open  atomic.Int64
	full  atomic.Uint64 // Accepts that found the listener full
	// onFull is called (when not nil) by an Accept that finds the
	// listener full, at most once per fullEvery.
	onFull   func(name string, max int)
	lastFull atomic.Int64 // unix nanoseconds of the last onFull call
	// writeStall, when positive, bounds each write of a connection: one
	// that makes no progress for that long fails, and the connection
	// closes (SetWriteStall).
	writeStall time.Duration
	// userTimeout, when positive, is set as each connection's
	// TCP_USER_TIMEOUT (SetTCPUserTimeout).
	userTimeout time.Duration

	mu      sync.Mutex
	idle    map[net.Conn]idleConn // HTTP connections between requests
	idleNew chan struct{}         // a connection turned idle (1 buffered)
	reaped  atomic.Uint64         // idle connections closed to make room

	closed    chan struct{}
	closeOnce sync.Once
}

// fullEvery is how often, at most, a full listener is reported. A
// variable for tests.
var fullEvery = time.Minute

// LimitConns wraps l, named name (for the reports: "http", "grpc", "api"),
// to hold at most max connections open at once; max <= 0 counts them and
// bounds nothing. onFull, when not nil, is called when an Accept finds the
// listener full (at most once a minute).
func LimitConns(l net.Listener, name string, max int, onFull func(name string, max int)) *ConnListener {
	c := &ConnListener{Listener: l, name: name, onFull: onFull, closed: make(chan struct{}),
		idle: make(map[net.Conn]idleConn), idleNew: make(chan struct{}, 1)}
	if max > 0 {
		c.slots = make(chan struct{}, max)
	}
	return c
}

// SetWriteStall bounds each write of the connections accepted from now
// on: a write that makes no progress for d fails, and the server closes
// the connection, so that a client that stops reading its responses
// cannot hold a slot of a bounded listener for ever (net/http's servers
// here have no WriteTimeout: a connection blocked writing stays active,
// which a full listener never closes). 0 sets none.
func (l *ConnListener) SetWriteStall(d time.Duration) { l.writeStall = d }

// SetTCPUserTimeout sets TCP_USER_TIMEOUT (on Linux) on each TCP
// connection accepted from now on: grpc-go sets it itself (to its
// keepalive timeout) only on a *net.TCPConn, which a ConnListener's
// connections are not. 0 sets none.
func (l *ConnListener) SetTCPUserTimeout(d time.Duration) { l.userTimeout = d }

// Accept accepts the next connection and, when the listener holds its
// bound of connections open, closes the one idle longest or waits until
// one closes or turns idle before returning it: no idle connection is
// closed before a new one is there to take its place. The connections
// that arrive meanwhile wait in the listen backlog. It returns an error
// wrapping net.ErrClosed once the listener is closed, waiting or not.
func (l *ConnListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if l.slots != nil {
		select {
		case l.slots <- struct{}{}:
		default:
			if err := l.makeRoom(); err != nil {
				c.Close()
				return nil, err
			}
		}
	}
	if l.userTimeout > 0 {
		setTCPUserTimeout(c, l.userTimeout)
	}
	l.open.Add(1)
	return &countedConn{Conn: c, l: l}, nil
}

// makeRoom takes a slot of a full listener, closing idle connections for
// it.
func (l *ConnListener) makeRoom() error {
	l.full.Add(1)
	l.reportFull()
	for {
		retry := l.closeIdle()
		// The slot the close freed, if any, before anything else: a
		// token in idleNew (every connection that turned idle leaves
		// one) would close a second idle connection for nothing.
		select {
		case l.slots <- struct{}{}:
			return nil
		default:
		}
		var again <-chan time.Time // when a request under way stops shielding
		var t *time.Timer
		if retry > 0 {
			t = time.NewTimer(retry)
			again = t.C
		}
		var err error
		select {
		case l.slots <- struct{}{}:
			return nil
		case <-l.idleNew:
		case <-again:
		case <-l.closed:
			err = fmt.Errorf("server: accept on %s: %w", l.name, net.ErrClosed)
		}
		if t != nil {
			t.Stop()
		}
		if err != nil {
			return err
		}
	}
}

// An idleConn is an idle HTTP connection: since when, and whether it
// speaks HTTP/2 (whose idle connections receive frames that are no
// request: window updates, pings).
type idleConn struct {
	since time.Time
	h2    bool
}

// underWay is how long bytes received on an idle HTTP/1 connection keep it
// from being closed: a request's header has that long to arrive whole
// (the servers' ReadHeaderTimeout) before net/http calls the connection
// active.
const underWay = 10 * time.Second

// closeIdle closes the connection idle longest, if any is, but no HTTP/1
// one that has received bytes since it turned idle, for underWay: net/http
// says a connection is active only once a request's whole header is in,
// and a request under way must not be cut. It returns, when it spared one
// and closed none, how long until the first spared one may be closed.
func (l *ConnListener) closeIdle() (retry time.Duration) {
	l.mu.Lock()
	var oldest net.Conn
	var since time.Time
	now := time.Now()
	for c, e := range l.idle {
		if cc := countedOf(c); cc != nil && !e.h2 {
			if at := cc.readAt.Load(); at != 0 {
				if left := time.Duration(at) + underWay - time.Duration(now.UnixNano()); left > 0 {
					if retry == 0 || left < retry {
						retry = left
					}
					continue
				}
			}
		}
		if oldest == nil || e.since.Before(since) {
			oldest, since = c, e.since
		}
	}
	delete(l.idle, oldest)
	l.mu.Unlock()
	if oldest == nil {
		return retry
	}
	l.reaped.Add(1)
	oldest.Close()
	return 0
}

// speaksH2 reports whether the connection c speaks HTTP/2: h2 by ALPN over
// TLS, or h2c with prior knowledge (its first bytes the HTTP/2 preface).
func speaksH2(c net.Conn) bool {
	if tc, ok := c.(interface{ ConnectionState() tls.ConnectionState }); ok {
		return tc.ConnectionState().NegotiatedProtocol == "h2"
	}
	cc := countedOf(c)
	return cc != nil && cc.h2c.Load()
}

// countedOf returns the countedConn c is or wraps (a TLS connection's), nil
// for none.
func countedOf(c net.Conn) *countedConn {
	switch c := c.(type) {
	case *countedConn:
		return c
	case interface{ NetConn() net.Conn }: // *tls.Conn
		cc, _ := c.NetConn().(*countedConn)
		return cc
	}
	return nil
}

// Track is an http.Server's ConnState hook: it keeps the connections that
// are idle between two requests, the ones a full listener closes first.
func (l *ConnListener) Track(c net.Conn, st http.ConnState) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if st != http.StateIdle {
		delete(l.idle, c)
		return
	}
	if cc := countedOf(c); cc != nil {
		cc.readAt.Store(0) // from now on, a byte read is a new request's
	}
	l.idle[c] = idleConn{since: time.Now(), h2: speaksH2(c)}
	select {
	case l.idleNew <- struct{}{}:
	default:
	}
}

func (l *ConnListener) reportFull() {
	if l.onFull == nil {
		return
	}
	now, last := time.Now().UnixNano(), l.lastFull.Load()
	if last != 0 && now-last < int64(fullEvery) || !l.lastFull.CompareAndSwap(last, now) {
		return
	}
	l.onFull(l.name, cap(l.slots))
}

func (l *ConnListener) release() {
	if l.slots != nil {
		<-l.slots
	}
}

// Close closes the listener, and ends an Accept that waits for room.
func (l *ConnListener) Close() error {
	l.closeOnce.Do(func() { close(l.closed) })
	return l.Listener.Close()
}

// Open returns how many of the connections it accepted are open.
func (l *ConnListener) Open() int64 { return l.open.Load() }

// Full returns how many Accepts found the listener holding its bound of
// connections.
func (l *ConnListener) Full() uint64 { return l.full.Load() }

// Reaped returns how many idle connections a full listener closed to make
// room.
func (l *ConnListener) Reaped() uint64 { return l.reaped.Load() }

// Max returns the bound, 0 for none.
func (l *ConnListener) Max() int { return cap(l.slots) }

// A countedConn gives its slot back on its first Close.
type countedConn struct {
	net.Conn
	l      *ConnListener
	closed atomic.Bool
	// readAt is the time (unix ns) of the first Read that returned bytes
	// since the connection turned idle (Track clears it), 0 for none.
	readAt atomic.Int64
	// h2c is set when the connection's first bytes are the HTTP/2
	// preface; started is set by the first Read that returned bytes.
	h2c, started atomic.Bool
	// wdl is the write deadline the connection's user set (unix ns, 0
	// for none), which the write stall never pushes back.
	wdl atomic.Int64
}

func (c *countedConn) SetWriteDeadline(t time.Time) error {
	c.noteWriteDeadline(t)
	return c.Conn.SetWriteDeadline(t)
}

func (c *countedConn) SetDeadline(t time.Time) error {
	c.noteWriteDeadline(t)
	return c.Conn.SetDeadline(t)
}

func (c *countedConn) noteWriteDeadline(t time.Time) {
	if t.IsZero() {
		c.wdl.Store(0)
	} else {
		c.wdl.Store(t.UnixNano())
	}
}

// h2Preface is how an HTTP/2 connection with prior knowledge begins.
const h2Preface = "PRI * HTTP/2.0"

func (c *countedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		if !c.started.Load() {
			c.started.Store(true)
			c.h2c.Store(bytes.HasPrefix(b[:n], []byte(h2Preface)))
		}
		if c.readAt.Load() == 0 {
			c.readAt.Store(time.Now().UnixNano())
		}
	}
	return n, err
}

// Write writes b, each step of it within the write stall when one is set:
// a write that makes progress gets another stall's time for the rest, one
// that makes none for that long fails (and the server closes the
// connection).
func (c *countedConn) Write(b []byte) (int, error) {
	d := c.l.writeStall
	if d <= 0 {
		return c.Conn.Write(b)
	}
	total := 0
	for {
		// The stall's deadline, or the user's when that comes first (a
		// TLS close_notify's 5 s): the stall never pushes one back.
		dl, mine := time.Now().Add(d), true
		if u := c.wdl.Load(); u != 0 && u < dl.UnixNano() {
			dl, mine = time.Unix(0, u), false
		}
		if err := c.Conn.SetWriteDeadline(dl); err != nil {
			return total, err
		}
		n, err := c.Conn.Write(b)
		total += n
		b = b[n:]
		if err == nil || len(b) == 0 || n == 0 || !mine || !errors.Is(err, os.ErrDeadlineExceeded) {
			return total, err
		}
	}
}

func (c *countedConn) Close() error {
	err := c.Conn.Close()
	if c.closed.CompareAndSwap(false, true) {
		c.l.open.Add(-1)
		c.l.release()
	}
	return err
}

// CloseWrite half-closes a TCP connection, as net/http does to end one
// gracefully (net/http looks for the method).
func (c *countedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// writeStall is SetWriteStall's bound on the HTTP (not in gateway mode,
// whose --client-timeout bounds writes) and API listeners that
// LimitConns bounds. A variable for tests.
var writeStall = 30 * time.Second

// grpcUserTimeout is the TCP_USER_TIMEOUT of a bounded gRPC listener's
// connections: grpc-go's own default (its keepalive timeout), which it
// sets only on connections it gets unwrapped.
const grpcUserTimeout = 20 * time.Second

// LimitConns wraps the HTTP and (when set) API listeners of ls in
// ConnListeners that hold at most max connections open each (max <= 0:
// no bound, the connections only counted), and the gRPC listener too
// when max > 0 (unbounded, it is left as it is: grpc-go keeps idle
// connections cheaper, and sets their TCP_USER_TIMEOUT, only on a bare
// *net.TCPConn). It exports them as the connections_* metrics, and makes
// a listener that finds itself full a WARN event, at most once a minute
// per listener. Serve then tells the HTTP and API ones which connections
// are idle, the ones closed first to make room. A bounded HTTP (not in
// gateway mode) or API connection whose write makes no progress for 30 s
// is closed. The admin listener is left as it is: an operator reaches
// /metrics and the dashboard while the others are full. Call it once,
// after the Server's options are set and before Serve, and before a TLS
// listener goes around them.
func (s *Server) LimitConns(ls Listeners, max int) Listeners {
	onFull := func(name string, max int) {
		s.Warn("connections", fmt.Sprintf("listener %s holds %d connections, its --max-connections: idle keep-alive connections are closed to make room, and new connections wait in the listen backlog until one closes", name, max))
	}
	s.conns = make(map[string]*ConnListener)
	for _, l := range []struct {
		name string
		l    *net.Listener
	}{{"http", &ls.HTTP}, {"grpc", &ls.GRPC}, {"api", &ls.API}} {
		if *l.l == nil || l.name == "grpc" && max <= 0 {
			continue
		}
		cl := LimitConns(*l.l, l.name, max, onFull)
		switch {
		case max <= 0:
		case l.name == "grpc":
			cl.SetTCPUserTimeout(grpcUserTimeout)
		case l.name == "api", s.gateway == nil:
			cl.SetWriteStall(writeStall)
		}
		s.metrics.Listener(l.name, max, cl.Open, cl.Full, cl.Reaped)
		s.conns[l.name] = cl
		*l.l = cl
	}
	return ls
}

// connState returns the ConnState hook of the HTTP server on the listener
// named name: track, and the listener's Track when LimitConns wrapped it.
func (s *Server) connState(name string, track func(net.Conn, http.ConnState)) func(net.Conn, http.ConnState) {
	cl := s.conns[name]
	if cl == nil {
		return track
	}
	return func(c net.Conn, st http.ConnState) {
		track(c, st)
		cl.Track(c, st)
	}
}
