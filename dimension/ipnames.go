package dimension

import (
	"encoding/binary"
	"net/netip"
	"sync"
)

// ipNames keeps the remote_address values of the clients seen lately, so
// that a known client's value costs a map lookup rather than an
// allocation. The value is a string the descriptor's consumer may keep
// (a Decider that logs or queues it): it is shared, never reused.
//
// It is bounded: each of its ipShards shards holds at most ipShardMax
// values and is emptied when full, so a stream of new clients costs at
// most ipShards×ipShardMax values (≈ 5 MB) and an allocation per new
// client, as without it. It is safe for concurrent use.
type ipNames struct {
	shards [ipShards]ipShard
}

const (
	ipShards   = 64
	ipShardMax = 1024
)

type ipShard struct {
	mu sync.RWMutex
	m  map[netip.Prefix]string
	_  [32]byte // one shard per cache line: no false sharing between locks
}

// text returns ipText(a, v4, v6), from the shard when it is there.
func (c *ipNames) text(a netip.Addr, v4, v6 int) string {
	var key netip.Prefix
	if a.Is4() && v4 == 32 || a.Is6() && v6 == 128 {
		key = netip.PrefixFrom(a, a.BitLen())
	} else {
		key = Collapse(a, v4, v6)
	}
	s := &c.shards[shardOf(key)]
	s.mu.RLock()
	v, ok := s.m[key]
	s.mu.RUnlock()
	if ok {
		return v
	}
	v = ipText(a, v4, v6)
	s.mu.Lock()
	if s.m == nil || len(s.m) >= ipShardMax {
		s.m = make(map[netip.Prefix]string)
	}
	s.m[key] = v
	s.mu.Unlock()
	return v
}

// shardOf spreads prefixes over the shards by all of their bits: collapsed
// IPv6 networks differ only in their upper half, IPv4 addresses only in
// their last bytes.
func shardOf(p netip.Prefix) int {
	b := p.Addr().As16()
	hi, lo := binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])
	h := (hi*0x9e3779b97f4a7c15 ^ lo) * 0xbf58476d1ce4e5b9
	h ^= uint64(p.Bits())
	return int(h >> (64 - 6)) // ipShards = 1<<6
}
