package redis

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/testserver"
)

// slowLink forwards connections from a loopback listener to addr, holding
// each chunk a client sends for delay before passing it on: a distant
// store, where every round trip costs delay.
func slowLink(t *testing.T, addr string, delay time.Duration) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", addr)
			if err != nil {
				c.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, c, s)
			mu.Unlock()
			wg.Add(2)
			go func() { // client to server, delayed
				defer wg.Done()
				defer s.Close()
				buf := make([]byte, 64<<10)
				for {
					n, err := c.Read(buf)
					if n > 0 {
						time.Sleep(delay)
						if _, err := s.Write(buf[:n]); err != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}()
			go func() {
				defer wg.Done()
				defer c.Close()
				_, _ = io.Copy(c, s)
			}()
		}
	}()
	return ln.Addr().String()
}

// TestOpenLoadsScriptsInOneRoundTrip: Open loads every script on a node
// in one round trip, so a store 40 ms away opens within a 400 ms timeout;
// one SCRIPT LOAD at a time took a round trip per script (over a dozen),
// past the timeout, and the store did not open.
func TestOpenLoadsScriptsInOneRoundTrip(t *testing.T) {
	if n := len(allPrograms()); n < 10 {
		t.Fatalf("%d scripts: the test needs enough that one round trip each passes the timeout", n)
	}
	srv := testserver.NewRedis(t)
	addr := slowLink(t, srv.Addr, 40*time.Millisecond)
	start := time.Now()
	s, err := Open("redis://"+addr, WithTimeout(400*time.Millisecond))
	if err != nil {
		t.Fatalf("Open over a 40 ms link with a 400 ms timeout: %v (after %v)", err, time.Since(start))
	}
	s.Close()
}
