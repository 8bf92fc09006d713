package memcached

import (
	"crypto/md5"
	"encoding/binary"
	"net"
	"slices"
	"strconv"

	"github.com/bradfitz/gomemcache/memcache"
)

// gomemcache's own ServerList picks crc32(key) mod n: adding or removing a
// server moves almost every key, and with it every limit's count (a moved
// key starts from zero, i.e. admits a fresh budget). A ketama ring moves
// only about 1/n of the keys. The points are libketama's: 40 MD5 digests of
// "host:port-i" per server, four 32-bit points each, so the placement is
// the one other ketama clients (libmemcached, pylibmc, spymemcached) use for
// the same server list.

const ketamaDigests = 40 // 160 points per server

// ring is a ketama consistent-hash memcache.ServerSelector. It is immutable
// and safe for concurrent use.
type ring struct {
	points []uint32
	owner  []int // owner[i] is the index in addrs of points[i]
	addrs  []net.Addr
}

// newRing checks that the servers (host:port, as ParseURL returns them)
// resolve and builds their ring. Each server is kept, hashed and dialed
// as written: a host name is resolved again at every connection, so that
// a server that comes back on another address is found there.
func newRing(servers []string) (*ring, error) { return buildRing(servers, true) }

// buildRing is newRing, checking that the servers resolve when resolve is
// set. Without (WithPartialStart), a name that does not resolve is a
// server that does not answer: its check fails with the lookup's error.
func buildRing(servers []string, resolve bool) (*ring, error) {
	r := &ring{addrs: make([]net.Addr, len(servers))}
	type point struct {
		h   uint32
		srv int
	}
	pts := make([]point, 0, len(servers)*ketamaDigests*4)
	for i, s := range servers {
		if _, err := net.ResolveTCPAddr("tcp", s); err != nil && resolve {
			return nil, err
		}
		r.addrs[i] = staticAddr{network: "tcp", str: s}
		for d := 0; d < ketamaDigests; d++ {
			sum := md5.Sum([]byte(s + "-" + strconv.Itoa(d)))
			for h := 0; h < 4; h++ {
				pts = append(pts, point{binary.LittleEndian.Uint32(sum[h*4:]), i})
			}
		}
	}
	slices.SortFunc(pts, func(a, b point) int {
		if a.h != b.h {
			if a.h < b.h {
				return -1
			}
			return 1
		}
		return a.srv - b.srv
	})
	r.points = make([]uint32, len(pts))
	r.owner = make([]int, len(pts))
	for i, p := range pts {
		r.points[i], r.owner[i] = p.h, p.srv
	}
	return r, nil
}

// ketamaHash is libketama's key hash: the first four bytes of MD5, little-endian.
func ketamaHash(s string) uint32 {
	sum := md5.Sum([]byte(s))
	return binary.LittleEndian.Uint32(sum[:4])
}

// server returns the index of the server owning mkey.
func (r *ring) server(mkey string) int {
	if len(r.addrs) == 1 {
		return 0
	}
	return r.serverOfHash(ketamaHash(hashPart(mkey)))
}

// PickServer implements memcache.ServerSelector.
func (r *ring) PickServer(key string) (net.Addr, error) {
	if len(r.addrs) == 0 {
		return nil, memcache.ErrNoServers
	}
	return r.addrs[r.server(key)], nil
}

// Each implements memcache.ServerSelector.
func (r *ring) Each(f func(net.Addr) error) error {
	for _, a := range r.addrs {
		if err := f(a); err != nil {
			return err
		}
	}
	return nil
}

// staticAddr is a server's address as the URL writes it (a host name is
// not resolved: the dialer resolves it at each connection); gomemcache
// keys its connection pool by String().
type staticAddr struct{ network, str string }

func (a staticAddr) Network() string { return a.network }
func (a staticAddr) String() string  { return a.str }
