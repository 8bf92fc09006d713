package memcached

import (
	"encoding/binary"

	"github.com/floodgate/floodgate/algo"
)

// MaxItemSize returns the item size limit the store keeps to, in bytes:
// the smallest of WithMaxItemSize and the item_size_max (memcached's -I)
// that the ring's servers reported to Open (stats settings; under
// WithPartialStart, those that answered). A state whose item would be
// larger is refused with store.ErrBadRequest (see MaxStateSize). It says
// what Open found: a server restarted since with a smaller -I refuses the
// larger items itself, with the same error.
func (s *Store) MaxItemSize() int { return s.cfg.maxItemSize }

// MaxStateSize returns, in bytes, the largest item that one key's state of
// l takes on the store, counted as Take counts it against MaxItemSize: the
// encoded value at its fullest, the longest memcached key the store writes
// for it (the key prefix, an encoded key of up to 160 bytes and its tag)
// and memcached's per-item overhead (64 bytes). A key of l's whose state
// would grow past MaxItemSize fails, from then on, with
// store.ErrBadRequest; MaxStateSize(l) <= MaxItemSize() says that no key
// of l ever does.
//
// Two algorithms keep state per unit held: a sliding log 8 bytes per unit
// (its admission time, in µs as a varint), up to l's limit; a concurrency
// limit up to 18 bytes per slot (its lease id, a random 64-bit value, and
// its expiry), up to l's limit (both limits are at most 1,048,576, so a
// MaxStateSize of at most about 19 MB). The other algorithms keep a few numbers,
// under 300 bytes with the key: the fixed and sliding windows one decimal
// counter per window or sub-window, the bucket and smooth algorithms three
// numbers in one item.
func (s *Store) MaxStateSize(l *algo.Limit) int {
	key := len(s.keys.prefix) + maxEncodedKey + len(tagSep)
	switch l.Algorithm() {
	case algo.FixedWindow, algo.SlidingWindow:
		// A decimal int64 counter under the longest tag, "w:" and two
		// 19-digit numbers.
		return itemOverhead + key + len("w:") + 19 + len(":") + 19 + len("-9223372036854775808")
	}
	return itemOverhead + key + len("s") + maxEncodedState(l)
}

const (
	// timeLen is the longest varint of a time the algorithms store: they
	// work with µs up to 2^53-1 (algo's latest instant, in the year 2255),
	// whose zigzag varint is 8 bytes.
	timeLen = 8
	// leaseLen is the longest varint of a concurrency lease id, any
	// 64-bit value.
	leaseLen = binary.MaxVarintLen64
)

// maxEncodedState is the largest value encodeState writes for a state of
// l: the algorithm's byte, the expiry, the state's version byte, A, B and
// C, the length of Ext and Ext's entries (see algo.State.AppendBinary).
func maxEncodedState(l *algo.Limit) int {
	head := 1 + timeLen + 1 // algorithm, expiry, version
	var entries, each int   // Ext's length and the longest of its entries
	switch l.Algorithm() {
	case algo.SlidingLog:
		// One time per unit held.
		entries, each = 1, timeLen
	case algo.Concurrency:
		// A lease id and an expiry per slot held.
		entries, each = 2, leaseLen+timeLen
	default:
		// A, B and C any int64 (a bucket's level is in unit·µs); no Ext.
		return head + 3*binary.MaxVarintLen64 + 1
	}
	// A and B are 0, C the latest time; then Ext. (algo.Compile bounds
	// both limits at 2^20.)
	n := int(l.Params().Limit)
	return head + 1 + 1 + timeLen + uvarintLen(uint64(n*entries)) + n*each
}

// uvarintLen is the length of v as a uvarint.
func uvarintLen(v uint64) int {
	var b [binary.MaxVarintLen64]byte
	return binary.PutUvarint(b[:], v)
}
