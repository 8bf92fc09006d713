package testserver

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"
)

// MigrateSlot moves one hash slot to the master to, the way
// `redis-cli --cluster reshard` does it: CLUSTER SETSLOT IMPORTING on to,
// MIGRATING on the slot's current master, the keys moved by MIGRATE in
// batches, then SETSLOT NODE on both and on every other master. between,
// when not nil, runs once after the first batch of keys moved and before
// the rest do (a slot caught half-migrated, as a slot holding many keys
// is for a while); keysFirst bounds that first batch (≤ 0: none).
// It returns the number of keys moved.
func (c *Cluster) MigrateSlot(slot int, to *Server, keysFirst int, between func()) (int, error) {
	nodes, err := c.ClusterNodes()
	if err != nil {
		return 0, err
	}
	var from, dst *ClusterNode
	for i := range nodes {
		n := &nodes[i]
		if n.IsMaster() && n.ServesSlot(slot) {
			from = n
		}
		if n.Addr == to.Addr {
			dst = n
		}
	}
	switch {
	case from == nil:
		return 0, fmt.Errorf("testserver: no master serves slot %d", slot)
	case dst == nil || !dst.IsMaster():
		return 0, fmt.Errorf("testserver: %s is not a master", to.Addr)
	case from.Addr == to.Addr:
		return 0, fmt.Errorf("testserver: %s already serves slot %d", to.Addr, slot)
	}
	sl := strconv.Itoa(slot)
	if _, err := RedisDo(to.Addr, probeTimeout, "CLUSTER", "SETSLOT", sl, "IMPORTING", from.ID); err != nil {
		return 0, fmt.Errorf("testserver: SETSLOT IMPORTING on %s: %w", to.Addr, err)
	}
	if _, err := RedisDo(from.Addr, probeTimeout, "CLUSTER", "SETSLOT", sl, "MIGRATING", dst.ID); err != nil {
		return 0, fmt.Errorf("testserver: SETSLOT MIGRATING on %s: %w", from.Addr, err)
	}
	host, port, err := net.SplitHostPort(to.Addr)
	if err != nil {
		return 0, err
	}
	moved := 0
	batch := func(limit int) (int, error) {
		v, err := RedisDo(from.Addr, probeTimeout, "CLUSTER", "GETKEYSINSLOT", sl, strconv.Itoa(limit))
		if err != nil {
			return 0, fmt.Errorf("testserver: GETKEYSINSLOT on %s: %w", from.Addr, err)
		}
		ks, _ := v.([]any)
		if len(ks) == 0 {
			return 0, nil
		}
		args := []string{"MIGRATE", host, port, "", "0", "5000", "KEYS"}
		for _, k := range ks {
			args = append(args, fmt.Sprint(k))
		}
		if _, err := RedisDo(from.Addr, 10*time.Second, args...); err != nil {
			return 0, fmt.Errorf("testserver: MIGRATE on %s: %w", from.Addr, err)
		}
		return len(ks), nil
	}
	if keysFirst > 0 {
		n, err := batch(keysFirst)
		if err != nil {
			return moved, err
		}
		moved += n
	}
	if between != nil {
		between()
	}
	for {
		n, err := batch(100)
		if err != nil {
			return moved, err
		}
		if n == 0 {
			break
		}
		moved += n
	}
	// The target first, then the source, then the others, as redis-cli.
	var errs []error
	set := func(addr string) {
		if _, err := RedisDo(addr, probeTimeout, "CLUSTER", "SETSLOT", sl, "NODE", dst.ID); err != nil {
			errs = append(errs, fmt.Errorf("testserver: SETSLOT NODE on %s: %w", addr, err))
		}
	}
	set(to.Addr)
	set(from.Addr)
	for _, n := range nodes {
		if n.IsMaster() && !n.Failing() && n.Addr != to.Addr && n.Addr != from.Addr {
			set(n.Addr)
		}
	}
	return moved, errors.Join(errs...)
}

// SlotOwner returns the master that serves slot, as CLUSTER NODES says.
func (c *Cluster) SlotOwner(slot int) (*Server, error) {
	nodes, err := c.ClusterNodes()
	if err != nil {
		return nil, err
	}
	for _, n := range nodes {
		if n.IsMaster() && !n.HasFlag("fail") && n.ServesSlot(slot) {
			if s := c.Node(n.Addr); s != nil {
				return s, nil
			}
		}
	}
	return nil, fmt.Errorf("testserver: no master serves slot %d", slot)
}
