package dimension

import (
	"fmt"
	"net/netip"
	"sync"
	"testing"
)

// The kept texts are ipText's, for IPv4 and IPv6 clients, whole and
// collapsed, the same address under two prefix lengths included, and stay
// right past the bound, when shards are emptied.
func TestIPNamesText(t *testing.T) {
	var c ipNames
	addrs := []netip.Addr{
		netip.MustParseAddr("192.0.2.7"),
		netip.MustParseAddr("2001:db8:1:2::9"),
		netip.MustParseAddr("2001:db8:1:2::a"),
	}
	for i := range ipShards*ipShardMax + 5000 {
		addrs = append(addrs, netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}))
	}
	for round := range 2 {
		for _, a := range addrs {
			for _, bits := range [][2]int{{32, 128}, {24, 64}, {16, 48}} {
				if got, want := c.text(a, bits[0], bits[1]), ipText(a, bits[0], bits[1]); got != want {
					t.Fatalf("round %d: text(%v, %d, %d) = %q, want %q", round, a, bits[0], bits[1], got, want)
				}
			}
		}
	}
	for i := range c.shards {
		if n := len(c.shards[i].m); n > ipShardMax {
			t.Errorf("shard %d holds %d texts, more than %d", i, n, ipShardMax)
		}
	}
}

// A known client's text is the kept string: no allocation.
func TestIPNamesKnownClientAllocatesNothing(t *testing.T) {
	var c ipNames
	a := netip.MustParseAddr("2001:db8:1:2::9")
	c.text(a, 32, 64)
	if n := testing.AllocsPerRun(100, func() { c.text(a, 32, 64) }); n != 0 {
		t.Errorf("%v allocations for a known client, want 0", n)
	}
}

// Concurrent lookups and additions (run with -race) each get their own
// client's text.
func TestIPNamesConcurrent(t *testing.T) {
	var c ipNames
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 3000 {
				a := netip.AddrFrom4([4]byte{198, 18, byte(g), byte(i % 251)})
				if got, want := c.text(a, 32, 64), fmt.Sprintf("198.18.%d.%d", g, i%251); got != want {
					t.Errorf("text = %q, want %q", got, want)
					return
				}
			}
		})
	}
	wg.Wait()
}

// The shards share the clients out: 10 000 consecutive IPv4 addresses, or
// IPv6 /64 networks, leave no shard with more than twice its share.
func TestIPNamesSpread(t *testing.T) {
	for _, kind := range []string{"ipv4", "ipv6/64"} {
		var n [ipShards]int
		for i := range 10_000 {
			var p netip.Prefix
			if kind == "ipv4" {
				p = netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)}), 32)
			} else {
				p = netip.PrefixFrom(netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 0, 0, byte(i >> 8), byte(i)}), 64)
			}
			n[shardOf(p)]++
		}
		for i, c := range n {
			if c > 2*10_000/ipShards {
				t.Errorf("%s: shard %d holds %d of 10 000 clients", kind, i, c)
			}
		}
	}
}
