package memory

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/floodgate/floodgate/algo"
)

// entry is one key's state and its lock, followed in the same
// pointer-free block by the key's bytes (see newEntry): a lookup compares
// the key, takes the lock and reads the state in the same cache line, and
// a decision writes only that line. The variable part of a state
// (algo.State.Ext), which only sliding logs, concurrency leases and
// multi-sub-window sliding windows use, lives in the shard's ext map.
type entry struct {
	mu sync.Mutex
	// hk is the key's hash (high 32 bits) and length (low 32 bits); it
	// never changes, so lookups read it without the lock.
	hk      uint64
	a, b, c int64 // algo.State's fixed part, under mu
	// meta is, under mu: the state's expiry in µs (bits 0-53), dead
	// (bit 54: removed from the table), hasExt (bit 55) and the algo.Kind
	// that wrote the state (bits 56-63).
	meta uint64
}

const (
	entrySize = int(unsafe.Sizeof(entry{}))
	expBits   = 54
	expMask   = 1<<expBits - 1
	deadBit   = 1 << expBits
	hasExt    = 1 << (expBits + 1)
	kindShift = 56
)

func (e *entry) exp() int64      { return int64(e.meta & expMask) }
func (e *entry) kind() algo.Kind { return algo.Kind(e.meta >> kindShift) }
func (e *entry) ext() bool       { return e.meta&hasExt != 0 }
func (e *entry) dead() bool      { return e.meta&deadBit != 0 }

// key returns the entry's key, stored right after it.
func (e *entry) key() string {
	return unsafe.String((*byte)(unsafe.Add(unsafe.Pointer(e), entrySize)), int(uint32(e.hk)))
}

// hashKey packs what entry.hk holds.
func hashKey(h uint64, key string) uint64 { return h>>32<<32 | uint64(uint32(len(key))) }

// newEntry allocates an entry for key, whose hash is h, and a copy of the
// key in one pointer-free block: nothing in it needs scanning, a new key
// costs one allocation, and the key is in the entry's cache line.
func newEntry(h uint64, key string) *entry {
	b := make([]byte, entrySize+len(key))
	copy(b[entrySize:], key)
	e := (*entry)(unsafe.Pointer(&b[0]))
	e.hk = hashKey(h, key)
	return e
}

// table is a shard's index: open addressing with linear probing over
// atomic pointers to entries. Readers probe it without a lock; the shard's
// lock serialises the writers (insert, remove, grow), which publish every
// change with an atomic store, and a grown table replaces the old one
// whole. A removed entry leaves a tombstone so that probe sequences stay
// unbroken, until the next growth rebuilds the table.
type table struct {
	slots []atomic.Pointer[entry]
	// tags holds, per slot, a tag of the hash of the slot's key (never 0),
	// or 0 for a slot never used: a probe compares tags, contiguous in
	// memory, and follows a pointer only when a tag matches, instead of
	// reading the entry of every slot it passes.
	tags []atomic.Uint32
	mask uint64
}

// tagOf is the table tag of hash h: its high 32 bits, never 0.
func tagOf(h uint64) uint32 { return uint32(h>>32) | 1 }

// tomb marks a slot whose entry was removed. It never matches a key.
var tomb = new(entry)

func newTable(size int) *table {
	return &table{slots: make([]atomic.Pointer[entry], size), tags: make([]atomic.Uint32, size), mask: uint64(size - 1)}
}

// set publishes e in slot i: the pointer first, then the tag, so that a
// reader that sees the tag sees the entry; a reader that sees neither yet
// misses, and a miss is always settled under the shard's lock.
func (t *table) set(i uint64, e *entry) {
	t.slots[i].Store(e)
	t.tags[i].Store(tagOf(e.hk))
}

// slotIndex is where a probe for hash h starts: the shard was chosen by
// h's low bits, the slot comes from its high 32, which entry.hk keeps (so
// slotIndex(e.hk) is where e's probe starts).
func (t *table) slotIndex(h uint64) uint64 { return (h >> 32) & t.mask }

// shard is a share of the keys: their index and the lock its writers take,
// on one cache line. Decisions on existing keys only read it.
type shard struct {
	mu    sync.Mutex            // serialises insert, remove and grow
	tab   atomic.Pointer[table] // nil once the store is closed
	extMu sync.Mutex            // guards ext; taken last, never held while taking another lock
	ext   map[*entry][]int64
	live  int // entries in tab, under mu
	tombs int // tombstones in tab, under mu
	// evictions and expired count removals, under mu.
	evictions int64
	expired   int64
}

// find returns key's entry, or nil. It takes no lock.
func (sh *shard) find(h uint64, key string) *entry {
	t := sh.tab.Load()
	if t == nil {
		return nil
	}
	hk, tag := hashKey(h, key), tagOf(h)
	for i := t.slotIndex(h); ; i = (i + 1) & t.mask {
		switch t.tags[i].Load() {
		case 0:
			return nil
		case tag:
			if e := t.slots[i].Load(); e != nil && e.hk == hk && e != tomb && e.key() == key {
				return e
			}
		}
	}
}

// insert returns key's entry, adding a fresh one if there is none, and
// false once the store is closed. perShard caps the live entries (0: no
// cap); a full shard evicts one first.
func (sh *shard) insert(h uint64, key string, perShard int, now int64) (*entry, bool) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	t := sh.tab.Load()
	if t == nil {
		return nil, false
	}
	if e := sh.find(h, key); e != nil {
		return e, true
	}
	e := newEntry(h, key)
	sh.add(e, perShard, now)
	return e, true
}

// add publishes e, whose key the table does not hold, evicting first if the
// shard is full and growing the table if need be. Everything written to e
// before is visible to whoever finds it. sh.mu is held.
func (sh *shard) add(e *entry, perShard int, now int64) {
	t := sh.tab.Load()
	if perShard > 0 && sh.live >= perShard {
		sh.evict(now)
	}
	if (sh.live+sh.tombs+1)*4 > len(t.slots)*3 {
		t = sh.rebuild()
	}
	for i := t.slotIndex(e.hk); ; i = (i + 1) & t.mask {
		cur := t.slots[i].Load()
		if cur == nil || cur == tomb {
			if cur == tomb {
				sh.tombs--
			}
			t.set(i, e)
			break
		}
	}
	sh.live++
}

// rebuild replaces the table by one sized for the live entries at half
// load, without tombstones, and returns it. sh.mu is held.
func (sh *shard) rebuild() *table {
	size := 8
	for size < 2*(sh.live+1) {
		size <<= 1
	}
	old := sh.tab.Load()
	t := newTable(size)
	for i := range old.slots {
		e := old.slots[i].Load()
		if e == nil || e == tomb {
			continue
		}
		j := t.slotIndex(e.hk)
		for t.slots[j].Load() != nil {
			j = (j + 1) & t.mask
		}
		t.set(j, e)
	}
	sh.tombs = 0
	sh.tab.Store(t)
	return t
}

// remove takes e, whose lock the caller holds, out of the table. sh.mu is
// held.
func (sh *shard) remove(e *entry) {
	e.meta |= deadBit
	t := sh.tab.Load()
	if t != nil {
		for i := t.slotIndex(e.hk); ; i = (i + 1) & t.mask {
			cur := t.slots[i].Load()
			if cur == nil {
				break
			}
			if cur == e {
				t.slots[i].Store(tomb)
				sh.live--
				sh.tombs++
				break
			}
		}
	}
	if e.ext() {
		sh.extMu.Lock()
		delete(sh.ext, e)
		sh.extMu.Unlock()
	}
}

// evict removes one entry of a full shard; see WithMaxKeys. It samples up
// to evictSamples entries from a random place. sh.mu is held.
func (sh *shard) evict(now int64) {
	t := sh.tab.Load()
	var victim *entry
	var best int64
	seen := 0
	start := rand.Uint64() & t.mask
	for n := uint64(0); n <= t.mask && seen < evictSamples; n++ {
		e := t.slots[(start+n)&t.mask].Load()
		if e == nil || e == tomb {
			continue
		}
		seen++
		e.mu.Lock()
		if exp := e.exp(); exp <= now {
			sh.remove(e)
			e.mu.Unlock()
			sh.expired++
			return
		} else if victim == nil || exp < best {
			victim, best = e, exp
		}
		e.mu.Unlock()
	}
	if victim != nil {
		victim.mu.Lock()
		sh.remove(victim)
		victim.mu.Unlock()
		sh.evictions++
	}
}
