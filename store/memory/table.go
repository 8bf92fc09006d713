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
// a decision writes only that line. The header is 44 bytes, so an entry
// with a key of up to 20 bytes is one 64-byte block, aligned on a cache
// line by the allocator. The variable part of a state (algo.State.Ext),
// which only sliding logs, concurrency leases and multi-sub-window sliding
// windows use, lives in the shard's ext map.
type entry struct {
	mu      sync.Mutex
	a, b, c int64 // algo.State's fixed part, under mu
	// meta is, under mu: the state's expiry in µs (bits 0-53), dead
	// (bit 54: removed from the table), hasExt (bit 55) and the algo.Kind
	// that wrote the state (bits 56-63).
	meta uint64
	// klen is the key's length; it never changes, so lookups read it
	// without the lock. The key's hash is kept in the index (slot.hk).
	klen uint32
	// The key's bytes follow, from keyOffset.
}

const (
	// keyOffset is where the key's bytes start in an entry's block: right
	// after klen, before the struct's trailing padding.
	keyOffset = int(unsafe.Offsetof(entry{}.klen)) + 4
	entrySize = int(unsafe.Sizeof(entry{}))
	expBits   = 54
	expMask   = 1<<expBits - 1
	deadBit   = 1 << expBits
	hasExt    = 1 << (expBits + 1)
	kindShift = 56
	// pending is the meta of an entry an all-or-nothing Take created and
	// has not decided yet (see insert): its kind is no algorithm's, so it
	// reads as fresh, and neither eviction nor Sweep removes it.
	pending = uint64(0xFF) << kindShift
)

func (e *entry) exp() int64      { return int64(e.meta & expMask) }
func (e *entry) kind() algo.Kind { return algo.Kind(e.meta >> kindShift) }
func (e *entry) ext() bool       { return e.meta&hasExt != 0 }
func (e *entry) dead() bool      { return e.meta&deadBit != 0 }

// undecided reports whether e was created by a Take still deciding it.
func (e *entry) undecided() bool { return e.meta&^(expMask|deadBit|hasExt) == pending }

// key returns the entry's key, stored right after its header.
func (e *entry) key() string {
	return unsafe.String((*byte)(unsafe.Add(unsafe.Pointer(e), keyOffset)), int(e.klen))
}

// hashKey is what the index keeps of a key to tell keys apart without
// reading their entries: the high 31 bits of its hash, a 1 bit (so that
// it is never 0, the mark of a slot never used) and its length.
func hashKey(h uint64, key string) uint64 {
	return (h>>33<<1|1)<<32 | uint64(uint32(len(key)))
}

// newEntry allocates an entry for key and a copy of the key in one
// pointer-free block: nothing in it needs scanning, a new key costs one
// allocation, and the key is in the entry's cache line.
func newEntry(key string) *entry {
	b := make([]byte, max(keyOffset+len(key), entrySize))
	copy(b[keyOffset:], key)
	e := (*entry)(unsafe.Pointer(&b[0]))
	e.klen = uint32(len(key))
	return e
}

// slot is one place of a shard's index: the hashKey of its key, or 0 if
// the slot was never used, beside the pointer to the key's entry, so that
// a probe reads one cache line per slot and follows a pointer only when
// the hash and length match.
type slot struct {
	hk atomic.Uint64
	e  atomic.Pointer[entry]
}

// table is a shard's index: open addressing with linear probing over
// slots. Readers probe it without a lock; the shard's lock serialises the
// writers (insert, remove, grow), which publish every change with atomic
// stores, and a grown table replaces the old one whole. A removed entry
// leaves a tombstone (its slot keeps its hk, its pointer becomes tomb) so
// that probe sequences stay unbroken, until the next rebuild.
type table struct {
	slots []slot
	mask  uint64
}

// tomb marks a slot whose entry was removed. It never matches a key.
var tomb = new(entry)

func newTable(size int) *table {
	return &table{slots: make([]slot, size), mask: uint64(size - 1)}
}

// set publishes e, whose hashKey is hk, in slot i: the pointer first, then
// hk, so that a reader that sees hk sees the entry (or, in a reused
// tombstone's slot that already had this hk, the tombstone); a reader that
// sees neither yet misses, and a miss is always settled under the shard's
// lock. A reader that pairs a slot's old hk with its new entry compares
// the entry's own key, so it can only miss.
func (t *table) set(i uint64, e *entry, hk uint64) {
	t.slots[i].e.Store(e)
	t.slots[i].hk.Store(hk)
}

// slotIndex is where a probe for hk starts. The shard was chosen by the
// hash's low bits; hk keeps its high ones.
func (t *table) slotIndex(hk uint64) uint64 { return (hk >> 33) & t.mask }

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

// find returns key's entry, or nil; hk is hashKey of key. It takes no
// lock.
func (sh *shard) find(hk uint64, key string) *entry {
	t := sh.tab.Load()
	if t == nil {
		return nil
	}
	for i := t.slotIndex(hk); ; i = (i + 1) & t.mask {
		sl := &t.slots[i]
		switch sl.hk.Load() {
		case 0:
			return nil
		case hk:
			if e := sl.e.Load(); e != nil && e != tomb && e.key() == key {
				return e
			}
		}
	}
}

// findLocked is find returning the entry locked. It takes the entry's lock
// before it reads the key, so that its first touch of the entry's cache
// line asks for it exclusively: reading the key first and then locking
// would fetch a line another core wrote twice, once to share it and once
// to own it. An entry whose key turns out to differ (a collision of hk) is
// unlocked again. The caller holds no other lock (see lockAll for
// several keys), and checks dead.
func (sh *shard) findLocked(hk uint64, key string) *entry {
	t := sh.tab.Load()
	if t == nil {
		return nil
	}
	for i := t.slotIndex(hk); ; i = (i + 1) & t.mask {
		sl := &t.slots[i]
		switch sl.hk.Load() {
		case 0:
			return nil
		case hk:
			if e := sl.e.Load(); e != nil && e != tomb {
				e.mu.Lock()
				if e.key() == key {
					return e
				}
				e.mu.Unlock()
			}
		}
	}
}

// insert returns key's entry, adding a fresh one if there is none, and
// false once the store is closed. perShard caps the live entries (0: no
// cap); a full shard evicts one first.
func (sh *shard) insert(hk uint64, key string, perShard int, now int64) (*entry, bool) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	t := sh.tab.Load()
	if t == nil {
		return nil, false
	}
	if e := sh.find(hk, key); e != nil {
		return e, true
	}
	// The entry is pending until the Take that made it saves its state:
	// otherwise, in a full shard, adding the Take's next key would evict
	// this one (a fresh state is the first to go), the Take would find it
	// gone and start again, and do so for ever.
	e := newEntry(key)
	e.meta = pending
	sh.add(e, hk, perShard, now)
	return e, true
}

// add publishes e, whose key the table does not hold and whose hashKey is
// hk, evicting first if the shard is full and growing the table if need
// be. Everything written to e before is visible to whoever finds it.
// sh.mu is held.
func (sh *shard) add(e *entry, hk uint64, perShard int, now int64) {
	t := sh.tab.Load()
	// One removal a key, or more after the pending entries of Takes over
	// several keys pushed the shard past its cap (see evict).
	for perShard > 0 && sh.live >= perShard && sh.evict(now) {
	}
	if (sh.live+sh.tombs+1)*4 > len(t.slots)*3 {
		t = sh.rebuild()
	}
	for i := t.slotIndex(hk); ; i = (i + 1) & t.mask {
		cur := t.slots[i].e.Load()
		if cur == nil || cur == tomb {
			if cur == tomb {
				sh.tombs--
			}
			t.set(i, e, hk)
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
		e := old.slots[i].e.Load()
		if e == nil || e == tomb {
			continue
		}
		hk := old.slots[i].hk.Load()
		j := t.slotIndex(hk)
		for t.slots[j].e.Load() != nil {
			j = (j + 1) & t.mask
		}
		t.set(j, e, hk)
	}
	sh.tombs = 0
	sh.tab.Store(t)
	return t
}

// removeIf locks the shard and e, whose hashKey is hk, and removes e if
// it is still in the table and cond(e) holds, counting it as expired if
// expired is set. Neither lock may be held by the caller.
func (sh *shard) removeIf(e *entry, hk uint64, expired bool, cond func(*entry) bool) {
	sh.mu.Lock()
	e.mu.Lock()
	if !e.dead() && cond(e) {
		sh.remove(e, hk)
		if expired {
			sh.expired++
		}
	}
	e.mu.Unlock()
	sh.mu.Unlock()
}

// remove takes e, whose lock the caller holds and whose hashKey is hk, out
// of the table. sh.mu is held.
func (sh *shard) remove(e *entry, hk uint64) {
	e.meta |= deadBit
	t := sh.tab.Load()
	if t != nil {
		for i := t.slotIndex(hk); ; i = (i + 1) & t.mask {
			cur := t.slots[i].e.Load()
			if cur == nil {
				break
			}
			if cur == e {
				t.slots[i].e.Store(tomb)
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
// to evictSamples entries from a random place, passing over the entries of
// Takes still deciding them (pending): when there is nothing else, it
// removes nothing and the shard holds more than its cap until those Takes
// are done. It reports whether it removed an entry. sh.mu is held.
func (sh *shard) evict(now int64) bool {
	t := sh.tab.Load()
	var victim *entry
	var victimHK uint64
	var best int64
	seen := 0
	start := rand.Uint64() & t.mask
	for n := uint64(0); n <= t.mask && seen < evictSamples; n++ {
		sl := &t.slots[(start+n)&t.mask]
		e := sl.e.Load()
		if e == nil || e == tomb {
			continue
		}
		e.mu.Lock()
		if e.undecided() {
			e.mu.Unlock()
			continue
		}
		seen++
		if exp := e.exp(); exp <= now {
			sh.remove(e, sl.hk.Load())
			e.mu.Unlock()
			sh.expired++
			return true
		} else if victim == nil || exp < best {
			victim, victimHK, best = e, sl.hk.Load(), exp
		}
		e.mu.Unlock()
	}
	if victim != nil {
		victim.mu.Lock()
		sh.remove(victim, victimHK)
		victim.mu.Unlock()
		sh.evictions++
	}
	return victim != nil
}
