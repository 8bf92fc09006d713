package memcached

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"sync/atomic"
	"syscall"
	"time"
)

// gomemcache keeps up to WithMaxIdleConns idle connections per server and
// takes one from the pool for each round trip without looking at it. When a
// server restarts (or closes idle connections, memcached's
// -o idle_timeout), every pooled connection to it is dead: each is found so
// by one failed request (EOF) and then dropped, one at a time. Behind
// store/resilient that kept a restarted server's breaker open for one
// cool-down per idle connection, its half-open probe taking a dead
// connection each time (64 cool-downs with the defaults, over a minute),
// while the server had been answering for long.
//
// So the store dials its own connections, and a connection is checked
// when a request begins on it: at the first write after the previous
// answer was read (gomemcache writes a whole request, then reads its whole
// answer). A connection whose server has closed it (a readable EOF or
// reset, or unexpected bytes waiting, which would be read as the answer) is
// then replaced by a new one to the same server, with the same deadline.
// The request has sent nothing yet, so the replacement is transparent. The
// check is one non-blocking read (fdAlive; a few hundred ns on Linux),
// skipped on a connection's first request.

// checkedConn is a connection that reconnects, when a request begins on
// it, if its server has closed it. gomemcache uses one connection from one
// goroutine at a time, so it needs no lock.
type checkedConn struct {
	net.Conn
	dial     func() (net.Conn, error)
	read     bool          // the last call was a Read: the next Write begins a request
	used     bool          // a request has begun on it
	deadline time.Time     // the last deadline set, for a replacement
	trips    *atomic.Int64 // counts the requests begun (round trips) to its server
	// The check, set up once per connection so that it allocates nothing.
	raw   syscall.RawConn // nil: not checked (not a socket)
	check func(fd uintptr) bool
	alive bool
	buf   [1]byte
}

func newCheckedConn(nc net.Conn, dial func() (net.Conn, error)) *checkedConn {
	c := &checkedConn{dial: dial}
	c.check = func(fd uintptr) bool {
		c.alive = fdAlive(fd, c.buf[:])
		return true // never wait for readiness
	}
	c.use(nc)
	return c
}

// use makes nc the connection's socket. A TLS connection is checked on
// its TCP socket: a server that closes it sends a close_notify alert then
// EOF, both of which the check sees; a server sends nothing else between
// an answer and the next request (TLS 1.3's session tickets come before
// the first answer, which reads them).
func (c *checkedConn) use(nc net.Conn) {
	c.Conn, c.raw = nc, nil
	under := nc
	if tc, ok := nc.(*tls.Conn); ok {
		under = tc.NetConn()
	}
	if sc, ok := under.(syscall.Conn); ok {
		c.raw, _ = sc.SyscallConn()
	}
}

// closed reports whether the server has closed the socket (see fdAlive).
func (c *checkedConn) closed() bool {
	if c.raw == nil {
		return false
	}
	c.alive = true
	if err := c.raw.Read(c.check); err != nil {
		return true
	}
	return !c.alive
}

func (c *checkedConn) Read(b []byte) (int, error) {
	c.read = true
	return c.Conn.Read(b)
}

func (c *checkedConn) Write(b []byte) (int, error) {
	if c.read || !c.used {
		c.begin()
	}
	return c.Conn.Write(b)
}

// begin starts a request (a round trip): it counts it and, unless it is
// the connection's first, replaces the socket if its server closed it.
// A pipelined batch (pipe.go) calls it before writing its commands.
func (c *checkedConn) begin() {
	c.read = false
	c.trips.Add(1)
	if !c.used {
		c.used = true
		return
	}
	if c.closed() {
		c.Conn.Close()
		nc, err := c.dial()
		if err != nil {
			nc = deadConn{err}
		}
		c.use(nc)
		nc.SetDeadline(c.deadline)
	}
}

// SetDeadline is how gomemcache bounds a round trip; the deadline is kept
// for a replacement connection.
func (c *checkedConn) SetDeadline(t time.Time) error {
	c.deadline = t
	return c.Conn.SetDeadline(t)
}

// dialNet returns the store's dial: a TCP dial and, for an address
// tlsFor holds (memcacheds://), a TLS handshake with its configuration,
// the two within timeout. address is the server as the URL names it
// (host:port, the port normalised): a host name is resolved at every dial,
// reconnections included, so that a server that comes back on another
// address (a Kubernetes pod) is found there.
func dialNet(timeout time.Duration, tlsFor map[string]*tls.Config) func(ctx context.Context, network, address string) (net.Conn, error) {
	d := &net.Dialer{Timeout: timeout}
	if tlsFor == nil {
		return d.DialContext
	}
	return func(ctx context.Context, network, address string) (net.Conn, error) {
		cfg := tlsFor[address]
		if cfg == nil {
			return nil, fmt.Errorf("memcached: no TLS configuration for %s, which is not a server of the ring", address)
		}
		// tls.Dialer bounds the dial and the handshake together by
		// d.Timeout.
		td := &tls.Dialer{NetDialer: d, Config: cfg}
		return td.DialContext(ctx, network, address)
	}
}

// tlsConfigs returns the TLS configuration of each server: given (or, nil,
// one verifying against the system roots), whose ServerName, when empty,
// is the server's host.
func tlsConfigs(addrs []net.Addr, given *tls.Config) map[string]*tls.Config {
	if given == nil {
		given = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	out := make(map[string]*tls.Config, len(addrs))
	for _, a := range addrs {
		c := given.Clone()
		if c.ServerName == "" {
			c.ServerName, _, _ = net.SplitHostPort(a.String())
		}
		out[a.String()] = c
	}
	return out
}

// dialer returns the gomemcache DialContext of a Store: dial (dialNet),
// whose connections are made checkedConns. trips returns the round-trip
// counter of the server at address.
func dialer(dial func(ctx context.Context, network, address string) (net.Conn, error), trips func(address string) *atomic.Int64) func(ctx context.Context, network, address string) (net.Conn, error) {
	return func(ctx context.Context, network, address string) (net.Conn, error) {
		nc, err := dial(ctx, network, address)
		if err != nil {
			return nil, err
		}
		redial := func() (net.Conn, error) {
			nc, err := dial(context.Background(), network, address)
			if err != nil {
				return nil, fmt.Errorf("reconnecting to %s, which closed the connection: %w", address, err)
			}
			return nc, nil
		}
		c := newCheckedConn(nc, redial)
		c.trips = trips(address)
		return c, nil
	}
}

// deadConn stands for a connection that could not be made again: every
// use fails with why, so that the request fails (and gomemcache drops the
// connection) with the dial's error rather than a closed socket's.
type deadConn struct{ err error }

func (c deadConn) Read([]byte) (int, error)         { return 0, c.err }
func (c deadConn) Write([]byte) (int, error)        { return 0, c.err }
func (c deadConn) Close() error                     { return nil }
func (c deadConn) LocalAddr() net.Addr              { return nil }
func (c deadConn) RemoteAddr() net.Addr             { return nil }
func (c deadConn) SetDeadline(time.Time) error      { return nil }
func (c deadConn) SetReadDeadline(time.Time) error  { return nil }
func (c deadConn) SetWriteDeadline(time.Time) error { return nil }
