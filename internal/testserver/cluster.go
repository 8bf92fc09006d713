package testserver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

const (
	// ClusterNodeTimeout is the cluster-node-timeout of the nodes started by
	// StartRedisCluster: a killed master is failed over roughly this long after it dies.
	ClusterNodeTimeout = 3 * time.Second
	// ClusterSlots is the number of hash slots of a Redis Cluster.
	ClusterSlots = 16384

	clusterMasters  = 3
	clusterReplicas = 3
	clusterTimeout  = 60 * time.Second
)

// Cluster is a Redis Cluster of 3 masters and 3 replicas started by StartRedisCluster.
// Roles change on failover: use Masters, Replicas or MasterFor to find the current ones.
type Cluster struct {
	Nodes []*Server // all six nodes, in start order
	Dir   string    // parent directory of the nodes' directories
}

// StartRedisCluster starts six cluster-enabled redis-server nodes on free ports (each with
// its cluster bus port, port+10000, free too), runs
// `redis-cli --cluster create ... --cluster-replicas 1 --cluster-yes`, and waits until every
// node reports cluster_state:ok with all 16384 slots served, 3 masters and 3 replicas, and
// every replica's link to its master is up. The caller must Stop it (defer c.Stop()).
// If redis-server or redis-cli is not installed the error is a *MissingBinaryError.
func StartRedisCluster() (*Cluster, error) {
	cli, err := lookBinary("redis-cli")
	if err != nil {
		return nil, err
	}
	if _, err := lookBinary("redis-server"); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "floodgate-redis-cluster-")
	if err != nil {
		return nil, fmt.Errorf("testserver: %w", err)
	}
	c := &Cluster{Dir: dir, Nodes: make([]*Server, clusterMasters+clusterReplicas)}
	fail := func(err error) (*Cluster, error) {
		c.Stop()
		return nil, err
	}

	// Start the nodes concurrently.
	errs := make([]error, len(c.Nodes))
	var wg sync.WaitGroup
	for i := range c.Nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.Nodes[i], errs[i] = startServer(redisSpec("redis-cluster",
				filepath.Join(dir, "node"+strconv.Itoa(i)), true,
				"--cluster-enabled", "yes",
				"--cluster-config-file", "nodes.conf",
				"--cluster-node-timeout", strconv.Itoa(int(ClusterNodeTimeout/time.Millisecond)),
			))
		}()
	}
	wg.Wait()
	c.Nodes = slices.DeleteFunc(c.Nodes, func(s *Server) bool { return s == nil })
	if err := errors.Join(errs...); err != nil {
		return fail(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput()
	if err != nil {
		return fail(fmt.Errorf("testserver: redis-cli %s: %v\n%s\n%s", strings.Join(args, " "), err, out, c.logs(4<<10)))
	}
	if err := c.waitHealthy(clusterTimeout, true); err != nil {
		return fail(fmt.Errorf("%w\n%s", err, c.logs(4<<10)))
	}
	return c, nil
}

// Addrs returns the addresses of all nodes (usable as cluster seed addresses).
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.Nodes))
	for i, s := range c.Nodes {
		out[i] = s.Addr
	}
	return out
}

// Node returns the node listening on addr, or nil.
func (c *Cluster) Node(addr string) *Server {
	for _, s := range c.Nodes {
		if s.Addr == addr {
			return s
		}
	}
	return nil
}

// Stop stops every node and removes the cluster's directory. Idempotent.
func (c *Cluster) Stop() error {
	err := stopAll(c.Nodes)
	os.RemoveAll(c.Dir)
	return err
}

// logs returns the tail of every node's log.
func (c *Cluster) logs(perNode int64) string {
	var b strings.Builder
	for _, s := range c.Nodes {
		fmt.Fprintf(&b, "--- %s (%s) ---\n%s", s.Addr, s.LogPath, s.logTail(perNode))
	}
	return b.String()
}

// ClusterNode is one line of CLUSTER NODES.
type ClusterNode struct {
	ID        string
	Addr      string   // client address host:port (without @bus port and hostname)
	Flags     []string // e.g. myself, master, slave, fail?, fail, handshake, noaddr
	MasterID  string   // for a replica, its master's ID; empty for a master
	Connected bool     // link-state is "connected"
	Slots     []string // slot ranges served, e.g. "0-5460", "42"; migration markers excluded
}

// HasFlag reports whether the node has flag f.
func (n ClusterNode) HasFlag(f string) bool { return slices.Contains(n.Flags, f) }

// IsMaster reports whether the node is a master.
func (n ClusterNode) IsMaster() bool { return n.HasFlag("master") }

// IsReplica reports whether the node is a replica.
func (n ClusterNode) IsReplica() bool { return n.HasFlag("slave") || n.HasFlag("replica") }

// Failing reports whether the node is flagged fail, fail? (pfail), handshake or noaddr.
func (n ClusterNode) Failing() bool {
	return n.HasFlag("fail") || n.HasFlag("fail?") || n.HasFlag("handshake") || n.HasFlag("noaddr")
}

// SlotCount returns the number of slots the node serves.
func (n ClusterNode) SlotCount() int {
	total := 0
	for _, r := range n.Slots {
		lo, hi, ok := strings.Cut(r, "-")
		if !ok {
			hi = lo
		}
		a, err1 := strconv.Atoi(lo)
		b, err2 := strconv.Atoi(hi)
		if err1 == nil && err2 == nil && b >= a {
			total += b - a + 1
		}
	}
	return total
}

// ServesSlot reports whether the node serves slot.
func (n ClusterNode) ServesSlot(slot int) bool {
	for _, r := range n.Slots {
		lo, hi, ok := strings.Cut(r, "-")
		if !ok {
			hi = lo
		}
		a, err1 := strconv.Atoi(lo)
		b, err2 := strconv.Atoi(hi)
		if err1 == nil && err2 == nil && slot >= a && slot <= b {
			return true
		}
	}
	return false
}

// ParseClusterNodes parses the reply of CLUSTER NODES.
func ParseClusterNodes(text string) ([]ClusterNode, error) {
	var nodes []ClusterNode
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 8 {
			return nil, fmt.Errorf("testserver: malformed CLUSTER NODES line %q", line)
		}
		addr := f[1]
		if i := strings.IndexAny(addr, "@,"); i >= 0 {
			addr = addr[:i]
		}
		n := ClusterNode{
			ID:        f[0],
			Addr:      addr,
			Flags:     strings.Split(f[2], ","),
			Connected: f[7] == "connected",
		}
		if f[3] != "-" {
			n.MasterID = f[3]
		}
		for _, s := range f[8:] {
			if !strings.HasPrefix(s, "[") { // skip [slot->-importing-id] markers
				n.Slots = append(n.Slots, s)
			}
		}
		nodes = append(nodes, n)
	}
	return nodes, nil
}

// clusterNodesFrom runs CLUSTER NODES on addr.
func clusterNodesFrom(addr string) ([]ClusterNode, error) {
	s, err := redisString(addr, probeTimeout, "CLUSTER", "NODES")
	if err != nil {
		return nil, err
	}
	return ParseClusterNodes(s)
}

// ClusterNodes returns CLUSTER NODES as seen by the first running node that answers.
func (c *Cluster) ClusterNodes() ([]ClusterNode, error) {
	var lastErr error = errors.New("testserver: no cluster node is running")
	for _, s := range c.Nodes {
		if !s.Running() {
			continue
		}
		nodes, err := clusterNodesFrom(s.Addr)
		if err == nil {
			return nodes, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

// Masters returns the running nodes that currently are healthy masters serving slots.
func (c *Cluster) Masters() ([]*Server, error) {
	return c.filter(func(n ClusterNode) bool { return n.IsMaster() && !n.Failing() && len(n.Slots) > 0 })
}

// Replicas returns the running nodes that currently are healthy replicas.
func (c *Cluster) Replicas() ([]*Server, error) {
	return c.filter(func(n ClusterNode) bool { return n.IsReplica() && !n.Failing() })
}

func (c *Cluster) filter(keep func(ClusterNode) bool) ([]*Server, error) {
	nodes, err := c.ClusterNodes()
	if err != nil {
		return nil, err
	}
	var out []*Server
	for _, n := range nodes {
		if s := c.Node(n.Addr); s != nil && s.Running() && keep(n) {
			out = append(out, s)
		}
	}
	return out, nil
}

// MasterFor returns the node that is currently the master of key's hash slot.
func (c *Cluster) MasterFor(key string) (*Server, error) {
	var slot int64 = -1
	for _, s := range c.Nodes {
		if !s.Running() {
			continue
		}
		v, err := RedisDo(s.Addr, probeTimeout, "CLUSTER", "KEYSLOT", key)
		if err != nil {
			continue
		}
		if n, ok := v.(int64); ok {
			slot = n
			break
		}
	}
	if slot < 0 {
		return nil, errors.New("testserver: CLUSTER KEYSLOT failed on every node")
	}
	nodes, err := c.ClusterNodes()
	if err != nil {
		return nil, err
	}
	for _, n := range nodes {
		if n.IsMaster() && !n.HasFlag("fail") && n.ServesSlot(int(slot)) {
			if s := c.Node(n.Addr); s != nil {
				return s, nil
			}
		}
	}
	return nil, fmt.Errorf("testserver: no master serves slot %d of key %q", slot, key)
}

// WaitHealthy waits until every running node reports cluster_state:ok with all slots
// served by exactly 3 healthy masters, sees every running node as healthy, and every
// running replica's link to its master is up. Use it after Kill (failover) or Restart.
func (c *Cluster) WaitHealthy(timeout time.Duration) error {
	return c.waitHealthy(timeout, false)
}

func (c *Cluster) waitHealthy(timeout time.Duration, allReplicas bool) error {
	return waitFor("redis cluster healthy", timeout, 100*time.Millisecond, func() error {
		return c.checkHealthy(allReplicas)
	})
}

func (c *Cluster) checkHealthy(allReplicas bool) error {
	running := 0
	for _, s := range c.Nodes {
		if !s.Running() {
			continue
		}
		running++
		info, err := redisString(s.Addr, probeTimeout, "CLUSTER", "INFO")
		if err != nil {
			return err
		}
		if st := infoField(info, "cluster_state"); st != "ok" {
			return fmt.Errorf("node %s: cluster_state %q", s.Addr, st)
		}
		if n := infoField(info, "cluster_slots_ok"); n != strconv.Itoa(ClusterSlots) {
			return fmt.Errorf("node %s: cluster_slots_ok %s", s.Addr, n)
		}
		nodes, err := clusterNodesFrom(s.Addr)
		if err != nil {
			return err
		}
		masters, replicas := 0, 0
		for _, n := range nodes {
			other := c.Node(n.Addr)
			if other == nil || !other.Running() {
				continue
			}
			if n.Failing() || !(n.HasFlag("myself") || n.Connected) {
				return fmt.Errorf("node %s sees %s as %v", s.Addr, n.Addr, n.Flags)
			}
			switch {
			case n.IsMaster() && len(n.Slots) > 0:
				masters++
			case n.IsReplica():
				replicas++
			}
			if n.HasFlag("myself") && n.IsReplica() {
				if err := replicaLinkUp(s.Addr); err != nil {
					return err
				}
			}
		}
		if masters != clusterMasters {
			return fmt.Errorf("node %s sees %d masters serving slots, want %d", s.Addr, masters, clusterMasters)
		}
		if allReplicas && replicas != clusterReplicas {
			return fmt.Errorf("node %s sees %d replicas, want %d", s.Addr, replicas, clusterReplicas)
		}
	}
	if running == 0 {
		return errors.New("no node is running")
	}
	return nil
}
