package memcached_test

import (
	"bytes"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// cutProxy is a TCP proxy on loopback in front of one memcached that, once
// armed with a command, closes the connection that sends it instead of
// forwarding it: the server never sees the command, and the client reads
// EOF in its place, as when the server fails between two round trips.
type cutProxy struct {
	ln      net.Listener
	backend string
	cmd     atomic.Pointer[[]byte] // nil: forward everything
	cuts    atomic.Int64

	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
}

func newCutProxy(t testing.TB, backend string) *cutProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, backend: backend}
	p.wg.Go(p.accept)
	t.Cleanup(p.close)
	return p
}

func (p *cutProxy) Addr() string { return p.ln.Addr().String() }

// CutOn arms the proxy: a connection that sends a command line starting
// with cmd (e.g. "decr ") is closed instead. "" disarms it.
func (p *cutProxy) CutOn(cmd string) {
	if cmd == "" {
		p.cmd.Store(nil)
		return
	}
	b := []byte(cmd)
	p.cmd.Store(&b)
}

func (p *cutProxy) accept() {
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
func (p *cutProxy) up(c, b net.Conn) {
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

func (p *cutProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}
