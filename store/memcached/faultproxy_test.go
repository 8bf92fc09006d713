package memcached_test

import (
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// faultProxy is a TCP proxy on loopback in front of one memcached that can
// cut connections in the middle of the server's replies or hold them back,
// so that tests see a pipelined step fail part way.
type faultProxy struct {
	ln      net.Listener
	backend string
	// cutPct: percentage of server→client chunks after which the proxy
	// forwards only part of the chunk and closes both sides.
	cutPct atomic.Int64
	// delay: each server→client chunk is held back this long.
	delay atomic.Int64
	// stall: server→client bytes are held until stall is cleared.
	stall atomic.Bool
	cuts  atomic.Int64

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

func newFaultProxy(t testing.TB, backend string) *faultProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &faultProxy{ln: ln, backend: backend, conns: map[net.Conn]struct{}{}}
	p.wg.Go(p.accept)
	t.Cleanup(p.close)
	return p
}

func (p *faultProxy) Addr() string { return p.ln.Addr().String() }

func (p *faultProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns == nil {
		c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *faultProxy) accept() {
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
		if !p.track(c) || !p.track(b) {
			c.Close()
			b.Close()
			continue
		}
		p.wg.Go(func() { io.Copy(b, c); b.Close(); c.Close() })
		p.wg.Go(func() { p.down(c, b); b.Close(); c.Close() })
	}
}

// down copies the server's replies to the client, with the faults.
func (p *faultProxy) down(c, b net.Conn) {
	buf := make([]byte, 4096)
	for {
		n, err := b.Read(buf)
		if n > 0 {
			for i := 0; p.stall.Load() && i < 2000; i++ {
				time.Sleep(5 * time.Millisecond)
			}
			if d := p.delay.Load(); d > 0 {
				time.Sleep(time.Duration(d))
			}
			if pct := p.cutPct.Load(); pct > 0 && rand.Int64N(100) < pct {
				p.cuts.Add(1)
				c.Write(buf[:rand.IntN(n+1)])
				return
			}
			if _, err := c.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// CutAll closes every connection through the proxy now.
func (p *faultProxy) CutAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
		delete(p.conns, c)
	}
}

func (p *faultProxy) close() {
	p.ln.Close()
	p.stall.Store(false)
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	p.conns = nil
	p.mu.Unlock()
	p.wg.Wait()
}
