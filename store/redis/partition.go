package redis

import (
	"strconv"

	"github.com/floodgate/floodgate/store"
)

// clusterPartitions is the number of store.Partitioner partitions of a
// Cluster: its 16384 hash slots cut into ranges of slotsPerPartition.
//
// The ranges are fixed rather than the masters the client sees, because
// rueidis keeps its slot map private: Nodes builds a map of new clients
// on every call, far too dear for each decision, and a map of our own
// (CLUSTER SHARDS on a timer) would be a second, staler copy of the
// client's. Masters own contiguous slot ranges (redis-cli --cluster
// create gives each a third, resharding moves ranges), so each range
// belongs to one master, except the few that straddle the boundary
// between two; a dead master trips the breakers of its ranges and of
// those it shares. 64 ranges keep that edge small (at most 2 of 64 per
// boundary) and the breakers few: a dead master's traffic is spread over
// about 64 ÷ masters breakers, each opening after its own run of
// consecutive failures.
const (
	clusterPartitions = 64
	slotsPerPartition = slotCount / clusterPartitions
)

var _ store.Partitioner = (*Store)(nil)

// Partitions implements store.Partitioner: 64 on a Cluster, each a range
// of 256 hash slots (see PartitionName); 1 on a standalone server or
// under Sentinel, where every key is on the one master.
func (s *Store) Partitions() int {
	if s.mode != Cluster {
		return 1
	}
	return clusterPartitions
}

// Partition implements store.Partitioner: on a Cluster, the key's hash
// slot (Slot, which honours hash tags) divided by 256; 0 elsewhere.
func (s *Store) Partition(key string) int {
	if s.mode != Cluster {
		return 0
	}
	return Slot(key) / slotsPerPartition
}

// PartitionName implements store.Partitioner: "slots 256-511" for
// partition 1 of a Cluster; "" elsewhere.
func (s *Store) PartitionName(p int) string {
	if s.mode != Cluster {
		return ""
	}
	lo := p * slotsPerPartition
	return "slots " + strconv.Itoa(lo) + "-" + strconv.Itoa(lo+slotsPerPartition-1)
}
