package redis

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/store"
)

// scriptWrites is a TCP proxy on 127.0.0.1 in front of a Redis server
// that counts the client's writes holding a script call (EVAL or EVALSHA):
// each write is a round trip the client started, one command or a
// pipeline of them.
type scriptWrites struct {
	ln     net.Listener
	writes atomic.Int64
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  []net.Conn
}

func newScriptWrites(t *testing.T, backend string) *scriptWrites {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &scriptWrites{ln: ln}
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			b, err := net.Dial("tcp", backend)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, b)
			p.mu.Unlock()
			p.wg.Go(func() { _, _ = io.Copy(c, b) })
			p.wg.Go(func() {
				buf := make([]byte, 1<<20)
				for {
					n, err := c.Read(buf)
					if n > 0 {
						if bytes.Contains(buf[:n], []byte("EVAL")) {
							p.writes.Add(1)
						}
						if _, werr := b.Write(buf[:n]); werr != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

// TestNoScriptBatchReloadsPipelined: a batch of calls that meets a server
// which lost its script cache (SCRIPT FLUSH here; a restart or a failover
// in production) is sent again as one pipeline — the script loaded by the
// first call's EVAL, the others' EVALSHA behind it — not one round trip
// per call, which for a batch of 64 on a distant server outlasts the
// store's timeout. Every call is answered, and decided once.
func TestNoScriptBatchReloadsPipelined(t *testing.T) {
	srv := testserver.NewRedis(t)
	if srv == nil {
		return
	}
	proxy := newScriptWrites(t, srv.Addr)
	s := openT(t, "redis://"+proxy.ln.Addr().String())
	l, err := algo.Compile(algo.Params{Algorithm: algo.GCRA, Limit: 10, Period: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	const n = 16
	calls := make([]scriptArgs, n)
	for i := range calls {
		s.appendGroup(&calls[i], opTake, "", []store.Request{{Key: fmt.Sprintf("fg:noscript:%d", i), Limit: l, Cost: 1}}, nil, nil)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.client.Do(ctx, s.client.B().ScriptFlush().Build()).Error(); err != nil {
		t.Fatal(err)
	}
	before := proxy.writes.Load()
	res := s.evalMulti(ctx, calls)
	writes := proxy.writes.Load() - before
	for i, r := range res {
		if err := r.Error(); err != nil {
			t.Fatalf("call %d after SCRIPT FLUSH: %v", i, err)
		}
	}
	// The batch, then its calls again: 2 writes (a client may split a
	// large pipeline in two); one per call would be n + 2.
	if writes > 3 {
		t.Errorf("a batch of %d calls after SCRIPT FLUSH took %d script writes, want at most 3 (one pipeline to reload)", n, writes)
	}
	for i := range n {
		out := make([]algo.Decision, 1)
		if err := s.Peek(ctx, []store.Request{{Key: fmt.Sprintf("fg:noscript:%d", i), Limit: l, Cost: 1}}, out); err != nil {
			t.Fatal(err)
		}
		// A GCRA of 10 per hour after one take holds 9; a Peek of 1
		// reports what a take of 1 would leave.
		if out[0].Remaining != 8 {
			t.Errorf("key %d: a Peek of 1 after the batch leaves %d, want 8 (the batch charged once)", i, out[0].Remaining)
		}
	}
}
