package memcached

import (
	"strconv"
	"strings"
	"testing"
)

// TestPartitionIsTheServer: a key's partition is the index of the server
// its items live on, for the keys the encoding passes through, escapes and
// digests, and it costs no allocation for keys of ordinary length.
func TestPartitionIsTheServer(t *testing.T) {
	r, err := newRing(servers(3))
	if err != nil {
		t.Fatal(err)
	}
	s := &Store{ring: r, keys: keyer{prefix: "fg:"}}
	if s.Partitions() != 3 {
		t.Fatalf("Partitions() = %d, want 3", s.Partitions())
	}
	keys := []string{"a", "user:42", "path /a b", "é%{x}", strings.Repeat("x", 159), strings.Repeat("y", 500), strings.Repeat("é", 100)}
	for i := range 3000 {
		keys = append(keys, "fg:user:"+strconv.Itoa(i))
	}
	seen := map[int]int{}
	for _, k := range keys {
		want := r.server(s.keys.state(k))
		if got := s.Partition(k); got != want {
			t.Fatalf("Partition(%q) = %d, want %d (the server of its state)", k, got, want)
		}
		seen[want]++
	}
	if len(seen) != 3 {
		t.Fatalf("keys on %d servers, want 3", len(seen))
	}
	if got := s.PartitionName(1); got != "server 127.0.0.1:20001" {
		t.Errorf("PartitionName(1) = %q", got)
	}
	if n := testing.AllocsPerRun(100, func() { s.Partition("user:42:/api/v1/things") }); n != 0 {
		t.Errorf("Partition allocates %v times", n)
	}

	one, err := newRing(servers(1))
	if err != nil {
		t.Fatal(err)
	}
	s1 := &Store{ring: one, keys: keyer{prefix: "fg:"}}
	if s1.Partitions() != 1 || s1.Partition("k") != 0 || s1.PartitionName(0) != "" {
		t.Errorf("one server: %d partitions, Partition %d, name %q; want 1, 0, \"\"", s1.Partitions(), s1.Partition("k"), s1.PartitionName(0))
	}
}
