package server

import (
	"fmt"
	"net"
	"net/http"
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

	mu      sync.Mutex
	idle    map[net.Conn]time.Time // HTTP connections between requests, since when
	idleNew chan struct{}          // a connection turned idle (1 buffered)
	reaped  atomic.Uint64          // idle connections closed to make room

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
		idle: make(map[net.Conn]time.Time), idleNew: make(chan struct{}, 1)}
	if max > 0 {
		c.slots = make(chan struct{}, max)
	}
	return c
}

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
	l.open.Add(1)
	return &countedConn{Conn: c, l: l}, nil
}

// makeRoom takes a slot of a full listener, closing idle connections for
// it.
func (l *ConnListener) makeRoom() error {
	l.full.Add(1)
	l.reportFull()
	for {
		l.closeIdle()
		select {
		case l.slots <- struct{}{}:
			return nil
		case <-l.idleNew:
		case <-l.closed:
			return fmt.Errorf("server: accept on %s: %w", l.name, net.ErrClosed)
		}
	}
}

// closeIdle closes the connection idle longest, if any is.
func (l *ConnListener) closeIdle() {
	l.mu.Lock()
	var oldest net.Conn
	var since time.Time
	for c, t := range l.idle {
		if oldest == nil || t.Before(since) {
			oldest, since = c, t
		}
	}
	delete(l.idle, oldest)
	l.mu.Unlock()
	if oldest != nil {
		l.reaped.Add(1)
		oldest.Close()
	}
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
	l.idle[c] = time.Now()
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

// LimitConns wraps the HTTP, gRPC and (when set) API listeners of ls in
// ConnListeners that hold at most max connections open each (max <= 0:
// no bound, the connections only counted), exports them as the
// connections_* metrics, and makes a listener that finds itself full a
// WARN event, at most once a minute per listener. Serve then tells the
// HTTP and API ones which connections are idle, the ones closed first to
// make room. The admin listener is left as it is: an operator reaches
// /metrics and the dashboard while the others are full. Call it once,
// before Serve and before a TLS listener goes around them.
func (s *Server) LimitConns(ls Listeners, max int) Listeners {
	onFull := func(name string, max int) {
		s.Warn("connections", fmt.Sprintf("listener %s holds %d connections, its --max-connections: idle keep-alive connections are closed to make room, and new connections wait in the listen backlog until one closes", name, max))
	}
	s.conns = make(map[string]*ConnListener)
	for _, l := range []struct {
		name string
		l    *net.Listener
	}{{"http", &ls.HTTP}, {"grpc", &ls.GRPC}, {"api", &ls.API}} {
		if *l.l == nil {
			continue
		}
		cl := LimitConns(*l.l, l.name, max, onFull)
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
