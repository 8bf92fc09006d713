package testserver

import (
	"bytes"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// CutProxy is a TCP proxy on 127.0.0.1 in front of one server of a
// line-based protocol (memcached's text protocol) that, once armed with a
// command by CutOn, closes the connection that sends it instead of
// forwarding it: the server never sees the command, and the client reads
// EOF in place of its answer, as when the server fails between two round
// trips. A read from the client is forwarded whole or not at all, so a
// pipelined read holding the armed command at a line's start is dropped
// with the commands before it. It is closed by tb.Cleanup.
type CutProxy struct {
	ln      net.Listener
	backend string
	cmd     atomic.Pointer[[]byte] // nil: forward everything
	cuts    atomic.Int64

	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
}

// NewCutProxy starts a CutProxy in front of backend (host:port),
// forwarding everything until CutOn arms it.
func NewCutProxy(tb testing.TB, backend string) *CutProxy {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("testserver: CutProxy: %v", err)
	}
	p := &CutProxy{ln: ln, backend: backend}
	p.wg.Go(p.accept)
	tb.Cleanup(p.close)
	return p
}

// Addr is the proxy's address (host:port), for the client to dial.
func (p *CutProxy) Addr() string { return p.ln.Addr().String() }

// CutOn arms the proxy: a connection that sends a command line starting
// with cmd (e.g. "decr ") is closed instead. "" disarms it.
func (p *CutProxy) CutOn(cmd string) {
	if cmd == "" {
		p.cmd.Store(nil)
		return
	}
	b := []byte(cmd)
	p.cmd.Store(&b)
}

// Cuts is how many connections the proxy has closed on an armed command.
func (p *CutProxy) Cuts() int64 { return p.cuts.Load() }

func (p *CutProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		b, err := net.Dial("tcp", p.backend)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, b)
		p.mu.Unlock()
		p.wg.Go(func() { p.up(c, b); b.Close(); c.Close() })
		p.wg.Go(func() { io.Copy(c, b); b.Close(); c.Close() })
	}
}

// up forwards the client's commands to the server, one read at a time,
// unless a read holds the armed command at a line's start.
func (p *CutProxy) up(c, b net.Conn) {
	buf := make([]byte, 64<<10)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			if cmd := p.cmd.Load(); cmd != nil && (bytes.HasPrefix(buf[:n], *cmd) || bytes.Contains(buf[:n], append([]byte("\n"), *cmd...))) {
				p.cuts.Add(1)
				return
			}
			if _, err := b.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *CutProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}
