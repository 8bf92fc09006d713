package testserver

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"syscall"
	"testing"
)

// DeadNodes makes a client's connections to the Redis nodes marked down
// fail as they would to a dead node, leaving the node itself (perhaps
// shared with other tests) alone: a dial is refused (ECONNREFUSED), and
// a read or a write on a connection already open fails (ECONNRESET)
// while its node is down. Nodes are named by the address the client
// dials, host:port, as ClusterMaster returns it. The zero value has no
// node down and is ready to use; it is safe for concurrent use.
//
// Install Dial as the client's dialer, for store/redis:
//
//	dead := new(testserver.DeadNodes)
//	s, err := redis.Open(url, redis.WithClientOption(func(o *rueidis.ClientOption) { o.DialCtxFn = dead.Dial }))
//	...
//	dead.Down(testserver.ClusterMaster(t, seeds, key))
//	t.Cleanup(func() { dead.Up(addr) })
type DeadNodes struct{ down sync.Map } // address → struct{}

// Down marks the node at addr down.
func (d *DeadNodes) Down(addr string) { d.down.Store(addr, struct{}{}) }

// Up marks the node at addr up again: new dials and the connections
// still open reach it.
func (d *DeadNodes) Up(addr string) { d.down.Delete(addr) }

// IsDown reports whether the node at addr is marked down.
func (d *DeadNodes) IsDown(addr string) bool {
	_, ok := d.down.Load(addr)
	return ok
}

// Dial dials addr over TCP with nd unless addr is down; the connection
// it returns fails its reads and writes while addr is down. Its
// signature is rueidis.ClientOption's DialCtxFn; the TLS configuration
// is not used (the test servers speak plain TCP).
func (d *DeadNodes) Dial(ctx context.Context, addr string, nd *net.Dialer, _ *tls.Config) (net.Conn, error) {
	if d.IsDown(addr) {
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	}
	c, err := nd.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return &deadNodeConn{Conn: c, d: d, addr: addr}, nil
}

type deadNodeConn struct {
	net.Conn
	d    *DeadNodes
	addr string
}

func (c *deadNodeConn) Read(b []byte) (int, error) {
	if c.d.IsDown(c.addr) {
		return 0, &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
	}
	return c.Conn.Read(b)
}

func (c *deadNodeConn) Write(b []byte) (int, error) {
	if c.d.IsDown(c.addr) {
		return 0, &net.OpError{Op: "write", Net: "tcp", Err: syscall.ECONNRESET}
	}
	return c.Conn.Write(b)
}

// ClusterMaster returns the address (host:port) of the master serving
// key's hash slot in the Redis Cluster of seeds (as RedisCluster returns
// them), as the first seed that answers CLUSTER KEYSLOT and CLUSTER
// NODES sees it; it fails tb when none answers or no healthy master
// serves the slot. It asks the nodes over connections of its own, so a
// node a DeadNodes marks down is still found.
func ClusterMaster(tb testing.TB, seeds []string, key string) string {
	tb.Helper()
	addr, err := clusterMaster(seeds, key)
	if err != nil {
		tb.Fatal(err)
	}
	return addr
}

func clusterMaster(seeds []string, key string) (string, error) {
	err := errors.New("no seed address")
	for _, seed := range seeds {
		var addr string
		if addr, err = masterFrom(seed, key); err == nil {
			return addr, nil
		}
	}
	return "", fmt.Errorf("testserver: ClusterMaster of %q: %w", key, err)
}

// masterFrom asks the cluster node at seed, over one connection, for
// key's slot and the master serving it.
func masterFrom(seed, key string) (string, error) {
	c, err := DialRESP(seed, probeTimeout)
	if err != nil {
		return "", err
	}
	defer c.Close()
	v, err := c.Do("CLUSTER", "KEYSLOT", key)
	if err != nil {
		return "", fmt.Errorf("CLUSTER KEYSLOT on %s: %w", seed, err)
	}
	slot, ok := v.(int64)
	if !ok {
		return "", fmt.Errorf("CLUSTER KEYSLOT on %s: unexpected reply %#v", seed, v)
	}
	if v, err = c.Do("CLUSTER", "NODES"); err != nil {
		return "", fmt.Errorf("CLUSTER NODES on %s: %w", seed, err)
	}
	text, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("CLUSTER NODES on %s: unexpected reply %#v", seed, v)
	}
	nodes, err := ParseClusterNodes(text)
	if err != nil {
		return "", err
	}
	for _, n := range nodes {
		if n.IsMaster() && !n.Failing() && n.ServesSlot(int(slot)) {
			return n.Addr, nil
		}
	}
	return "", fmt.Errorf("no healthy master serves slot %d (CLUSTER NODES of %s)", slot, seed)
}
