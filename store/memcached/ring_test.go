package memcached

import (
	"hash/crc32"
	"strconv"
	"testing"
)

func servers(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = "127.0.0.1:" + strconv.Itoa(20000+i)
	}
	return out
}

func TestRingSpreadsKeys(t *testing.T) {
	r, err := newRing(servers(3))
	if err != nil {
		t.Fatal(err)
	}
	const keys = 30000
	var count [3]int
	for i := range keys {
		count[r.server("fg:user:"+strconv.Itoa(i)+"%%s")]++
	}
	for i, c := range count {
		// 160 points per server keep each share near 1/3.
		if c < keys/5 || c > keys/2 {
			t.Errorf("server %d holds %d of %d keys, want about a third", i, c, keys)
		}
	}
}

// TestRingIsConsistent shows why the store does not use gomemcache's
// ServerList: adding a fourth server to three moves about a quarter of the
// keys on the ring, and three quarters with crc32 mod n.
func TestRingIsConsistent(t *testing.T) {
	r3, err := newRing(servers(3))
	if err != nil {
		t.Fatal(err)
	}
	r4, err := newRing(servers(4))
	if err != nil {
		t.Fatal(err)
	}
	const keys = 20000
	movedRing, movedMod := 0, 0
	for i := range keys {
		k := "fg:k" + strconv.Itoa(i) + "%%s"
		a, b := r3.server(k), r4.server(k)
		if a != b {
			movedRing++
			if b != 3 {
				t.Fatalf("key %q moved from server %d to %d; keys may only move to the new server", k, a, b)
			}
		}
		h := crc32.ChecksumIEEE([]byte(k))
		if h%3 != h%4 {
			movedMod++
		}
	}
	t.Logf("adding a 4th server moves %d/%d keys on the ring, %d with crc32 mod n", movedRing, keys, movedMod)
	if movedRing > keys*35/100 {
		t.Errorf("ring moved %d of %d keys, want about a quarter", movedRing, keys)
	}
	if movedMod < keys*6/10 {
		t.Errorf("mod n moved only %d of %d keys; the comparison is off", movedMod, keys)
	}
}

func TestRingPlacementIsStable(t *testing.T) {
	a, _ := newRing(servers(5))
	b, _ := newRing(servers(5))
	for i := range 1000 {
		k := "k" + strconv.Itoa(i)
		if a.server(k) != b.server(k) {
			t.Fatalf("two rings over the same servers place %q differently", k)
		}
	}
}

func TestRingSingleServerAndEmpty(t *testing.T) {
	r, err := newRing(servers(1))
	if err != nil {
		t.Fatal(err)
	}
	a, err := r.PickServer("anything")
	if err != nil || a.String() != "127.0.0.1:20000" {
		t.Errorf("PickServer = %v, %v; want 127.0.0.1:20000", a, err)
	}
	if _, err := (&ring{}).PickServer("k"); err == nil {
		t.Error("PickServer on an empty ring: no error")
	}
}

func TestExpiration(t *testing.T) {
	s := &Store{skewSec: 1}
	const now = int64(1_700_000_000_000_000)
	tests := []struct {
		name      string
		expiresAt int64
		want      int32
	}{
		{"already fresh", 0, 2},
		{"1µs", now + 1, 3},
		{"exactly 1s", now + 1_000_000, 3},
		{"59.5s", now + 59_500_000, 62},
		{"30 days less slack", now + (maxRelativeTTL-2)*1_000_000, maxRelativeTTL},
	}
	for _, tt := range tests {
		if got := s.expiration(tt.expiresAt, now); got != tt.want {
			t.Errorf("%s: expiration = %d, want %d", tt.name, got, tt.want)
		}
	}
	// Past 30 days memcached wants an absolute Unix time.
	got := s.expiration(now+40*24*3600*1_000_000, now)
	if got < maxRelativeTTL*10 {
		t.Errorf("40 days: expiration = %d, want an absolute Unix time", got)
	}
}
