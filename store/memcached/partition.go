package memcached

import (
	"crypto/md5"
	"encoding/binary"
	"slices"

	"github.com/floodgate/floodgate/store"
)

var _ store.Partitioner = (*Store)(nil)

// Partitions implements store.Partitioner: one partition per server of the
// URL, in the URL's order. A dead server fails the keys the ring gives it
// and no others.
func (s *Store) Partitions() int { return len(s.ring.addrs) }

// Partition implements store.Partitioner: the index, in the URL's order,
// of the server holding key's state (ServerFor), found without allocating
// for keys of up to about 200 bytes.
func (s *Store) Partition(key string) int {
	if len(s.ring.addrs) == 1 {
		return 0
	}
	// The ring hashes what precedes the tag separator, the same for
	// every item of key (see keys.go): prefix and encoded key.
	var buf [256]byte
	b := append(buf[:0], s.keys.prefix...)
	b = encodeKey(b, key)
	sum := md5.Sum(b)
	return s.ring.serverOfHash(binary.LittleEndian.Uint32(sum[:4]))
}

// PartitionName implements store.Partitioner: "server host:port"; "" for
// a single server.
func (s *Store) PartitionName(p int) string {
	if len(s.ring.addrs) == 1 || p < 0 || p >= len(s.ring.addrs) {
		return ""
	}
	return "server " + s.ring.addrs[p].String()
}

// serverOfHash returns the index of the server owning ketama hash h.
func (r *ring) serverOfHash(h uint32) int {
	i, _ := slices.BinarySearch(r.points, h)
	if i == len(r.points) {
		i = 0
	}
	return r.owner[i]
}
