package testserver

import (
	"context"
	"errors"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestDeadNodes: a node marked down refuses dials (ECONNREFUSED) and the
// connection already open to it fails its writes and reads (ECONNRESET);
// marked up again, the same connection and new dials reach the server.
func TestDeadNodes(t *testing.T) {
	addr := Redis(t)
	d := new(DeadNodes)
	nd := &net.Dialer{Timeout: 5 * time.Second}
	ping := func(c net.Conn) error {
		if _, err := c.Write([]byte("PING\r\n")); err != nil {
			return err
		}
		buf := make([]byte, len("+PONG\r\n"))
		if err := c.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
			return err
		}
		if _, err := c.Read(buf); err != nil {
			return err
		}
		if string(buf) != "+PONG\r\n" {
			t.Fatalf("PING answered %q", buf)
		}
		return nil
	}
	c, err := d.Dial(context.Background(), addr, nd, nil)
	if err != nil {
		t.Fatalf("Dial(%s), nothing down: %v", addr, err)
	}
	defer c.Close()
	if err := ping(c); err != nil {
		t.Fatalf("PING, nothing down: %v", err)
	}

	d.Down(addr)
	if !d.IsDown(addr) || d.IsDown("127.0.0.1:1") {
		t.Fatalf("IsDown(%s) = %v, IsDown(127.0.0.1:1) = %v; want true, false", addr, d.IsDown(addr), d.IsDown("127.0.0.1:1"))
	}
	if c2, err := d.Dial(context.Background(), addr, nd, nil); !errors.Is(err, syscall.ECONNREFUSED) {
		if c2 != nil {
			c2.Close()
		}
		t.Errorf("Dial(%s), down: %v, want ECONNREFUSED", addr, err)
	}
	if _, err := c.Write([]byte("PING\r\n")); !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("Write, down: %v, want ECONNRESET", err)
	}
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("Read, down: %v, want ECONNRESET", err)
	}

	d.Up(addr)
	if err := ping(c); err != nil {
		t.Errorf("PING on the open connection, up again: %v", err)
	}
	c3, err := d.Dial(context.Background(), addr, nd, nil)
	if err != nil {
		t.Fatalf("Dial(%s), up again: %v", addr, err)
	}
	defer c3.Close()
	if err := ping(c3); err != nil {
		t.Errorf("PING on a new connection, up again: %v", err)
	}
}

// TestClusterMaster: the node ClusterMaster names for a key answers a GET
// of it; every other master answers MOVED. A seed that does not answer is
// passed over; none answering is an error naming the key.
func TestClusterMaster(t *testing.T) {
	seeds := RedisCluster(t)
	dead := "127.0.0.1:1" // nothing listens on port 1
	for _, key := range []string{"a", "b", "{user1}:x", "testserver:clustermaster"} {
		addr := ClusterMaster(t, append([]string{dead}, seeds...), key)
		if _, err := RedisDo(addr, 5*time.Second, "GET", key); err != nil {
			t.Errorf("GET %s on %s (its ClusterMaster): %v", key, addr, err)
		}
		nodes, err := clusterNodesFrom(seeds[0])
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range nodes {
			if !n.IsMaster() || n.Addr == addr {
				continue
			}
			if _, err := RedisDo(n.Addr, 5*time.Second, "GET", key); err == nil || !strings.HasPrefix(err.Error(), "MOVED ") {
				t.Errorf("GET %s on %s (another master): %v, want MOVED", key, n.Addr, err)
			}
		}
	}
	if addr, err := clusterMaster([]string{dead}, "a"); err == nil || !strings.Contains(err.Error(), `"a"`) {
		t.Errorf("clusterMaster(no seed answering) = %q, %v; want an error naming the key", addr, err)
	}
	if _, err := clusterMaster(nil, "a"); err == nil {
		t.Error("clusterMaster(no seed) did not fail")
	}
}
