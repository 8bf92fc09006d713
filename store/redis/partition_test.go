package redis

import (
	"strconv"
	"testing"
)

// TestPartitionIsASlotRange: on a Cluster a key's partition is its hash
// slot's range of 256, hash tags included, named by its slots; outside a
// Cluster there is one partition.
func TestPartitionIsASlotRange(t *testing.T) {
	c := &Store{mode: Cluster}
	if c.Partitions() != 64 {
		t.Fatalf("Cluster: Partitions() = %d, want 64", c.Partitions())
	}
	seen := map[int]bool{}
	for i := range 20000 {
		k := "user:" + strconv.Itoa(i)
		p := c.Partition(k)
		if lo := p * 256; Slot(k) < lo || Slot(k) > lo+255 {
			t.Fatalf("Partition(%q) = %d, but its slot is %d", k, p, Slot(k))
		}
		seen[p] = true
	}
	if len(seen) != 64 {
		t.Errorf("20000 keys in %d partitions, want all 64", len(seen))
	}
	if a, b := c.Partition("{tenant:7}:a"), c.Partition("x:{tenant:7}:b"); a != b {
		t.Errorf("keys of one hash tag in partitions %d and %d", a, b)
	}
	for p, want := range map[int]string{0: "slots 0-255", 21: "slots 5376-5631", 63: "slots 16128-16383"} {
		if got := c.PartitionName(p); got != want {
			t.Errorf("PartitionName(%d) = %q, want %q", p, got, want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { c.Partition("user:42:/api/v1/things") }); n != 0 {
		t.Errorf("Partition allocates %v times", n)
	}
	for _, m := range []Mode{Standalone, Sentinel} {
		s := &Store{mode: m}
		if s.Partitions() != 1 || s.Partition("user:1") != 0 || s.PartitionName(0) != "" {
			t.Errorf("%v: %d partitions, Partition %d, name %q; want 1, 0, \"\"", m, s.Partitions(), s.Partition("user:1"), s.PartitionName(0))
		}
	}
}
