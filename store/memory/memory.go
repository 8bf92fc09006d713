package memory

import (
	"context"
	"fmt"
	"hash/maphash"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/store"
)

// Store is the in-memory store. It implements store.Store and
// store.Inspector and is safe for concurrent use. Create it with New.
type Store struct {
	shards   []shard
	mask     uint64
	seed     maphash.Seed
	clock    func() time.Time // nil: base + monotonic time since
	base     time.Time
	baseUS   int64
	perShard int // key cap per shard; 0: none

	closed atomic.Bool
	stop   chan struct{}
	done   chan struct{}
}

// shard is one lock and the keys under it, padded to a cache line so that
// callers on neighbouring shards do not invalidate each other's lock.
type shard struct {
	mu        sync.Mutex
	m         map[string]*entry // nil once the store is closed
	ext       map[*entry][]int64
	evictions int64
	expired   int64
	_         [24]byte
}

// entry is one key's state: algo.State's fixed part and a word holding the
// state's expiry and what wrote it, 32 bytes in all. The variable part
// (algo.State.Ext), which only sliding logs, concurrency leases and
// multi-sub-window sliding windows use, lives in the shard's ext map, so
// the common key does not pay for a slice header.
type entry struct {
	a, b, c int64
	meta    uint64 // expiry µs (bits 0-54) | hasExt (bit 55) | algo.Kind (bits 56-63)
}

const (
	expBits   = 55
	expMask   = 1<<expBits - 1
	hasExt    = 1 << expBits
	kindShift = 56
)

func (e *entry) exp() int64      { return int64(e.meta & expMask) }
func (e *entry) kind() algo.Kind { return algo.Kind(e.meta >> kindShift) }
func (e *entry) ext() bool       { return e.meta&hasExt != 0 }

// Stats counts the store's keys and the removals that were not asked for.
type Stats struct {
	// Keys is the number of keys held, expired or not.
	Keys int64
	// Evictions counts keys removed before their state expired to keep
	// under WithMaxKeys.
	Evictions int64
	// Expired counts keys removed because their state had expired (by the
	// janitor, Sweep, eviction sampling or the call that found them so).
	Expired int64
}

var (
	errClosed   = fmt.Errorf("memory: %w", store.ErrClosed)
	errOutLen   = fmt.Errorf("memory: %w: out must have one decision per request", store.ErrBadRequest)
	errEmptyKey = fmt.Errorf("memory: %w: empty key", store.ErrBadRequest)
	errNilLimit = fmt.Errorf("memory: %w: nil limit", store.ErrBadRequest)

	_ store.Store     = (*Store)(nil)
	_ store.Inspector = (*Store)(nil)
)

// New returns an empty store. Options and their defaults:
//
//   - WithClock: the wall clock at New plus monotonic time since.
//   - WithShards: DefaultShards (256), rounded up to a power of two.
//   - WithMaxKeys: 0, no cap.
//   - WithSweepInterval: DefaultSweepInterval (1 minute); 0 disables the janitor.
//
// It returns an error wrapping ErrInvalidOption for an option out of range.
// Close the store to stop its janitor.
func New(opts ...Option) (*Store, error) {
	c := config{shards: DefaultShards, sweep: DefaultSweepInterval}
	for _, o := range opts {
		o(&c)
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	n := ceilPow2(c.shards)
	s := &Store{
		shards: make([]shard, n),
		mask:   uint64(n - 1),
		seed:   maphash.MakeSeed(),
		clock:  c.clock,
		base:   time.Now(),
	}
	s.baseUS = s.base.UnixMicro()
	if c.maxKeys > 0 {
		s.perShard = (c.maxKeys + n - 1) / n
	}
	for i := range s.shards {
		s.shards[i].m = make(map[string]*entry)
		s.shards[i].ext = make(map[*entry][]int64)
	}
	if c.sweep > 0 {
		s.stop, s.done = make(chan struct{}), make(chan struct{})
		go s.janitor(c.sweep)
	}
	return s, nil
}

// now is the store's time in µs since the epoch.
func (s *Store) now() int64 {
	if s.clock != nil {
		return s.clock().UnixMicro()
	}
	return s.baseUS + int64(time.Since(s.base)/time.Microsecond)
}

func (s *Store) shardIndex(key string) int {
	return int(maphash.String(s.seed, key) & s.mask)
}

// newEntry allocates a zero entry and a copy of key in one pointer-free
// block, the key's bytes right after the entry: the map's comparison of the
// key and the read of the entry then touch the same cache lines, which
// matters once the keys outnumber the cache, and a new key costs one
// allocation instead of two. The entry holds no pointers, so the block needs
// no scanning, and the string keeps the whole block alive.
func newEntry(key string) (*entry, string) {
	const size = int(unsafe.Sizeof(entry{}))
	b := make([]byte, size+len(key))
	copy(b[size:], key)
	return (*entry)(unsafe.Pointer(&b[0])), unsafe.String(&b[size], len(key))
}

func (sh *shard) load(e *entry, st *algo.State) {
	st.A, st.B, st.C = e.a, e.b, e.c
	if e.ext() {
		st.Ext = sh.ext[e]
	}
}

func (sh *shard) save(e *entry, st *algo.State, exp int64, k algo.Kind) {
	e.a, e.b, e.c = st.A, st.B, st.C
	meta := uint64(min(exp, expMask)) | uint64(k)<<kindShift
	switch {
	case st.Ext != nil:
		sh.ext[e] = st.Ext
		meta |= hasExt
	case e.ext():
		delete(sh.ext, e)
	}
	e.meta = meta
}

// remove deletes key, whose entry is e.
func (sh *shard) remove(key string, e *entry) {
	if e.ext() {
		delete(sh.ext, e)
	}
	delete(sh.m, key)
}

// lookup returns key's state in st and its entry if any. A missing key, a
// key written by another algorithm (its limit was reconfigured) and a key
// whose state has expired all read as a fresh (zero) state, whether or not
// the janitor has removed them yet, so that decisions do not depend on when
// it runs. The shard lock is held.
func (sh *shard) lookup(key string, k algo.Kind, st *algo.State, now int64) *entry {
	e := sh.m[key]
	if e != nil && e.kind() == k && e.exp() > now {
		sh.load(e, st)
	}
	return e
}

// peek is Peek on key's state, which it leaves as it was: the variable part
// is copied because Peek forgets expired entries in place. The shard lock
// is held.
func (sh *shard) peek(r *store.Request, now int64) algo.Decision {
	var st algo.State
	sh.lookup(r.Key, r.Limit.Algorithm(), &st, now)
	if st.Ext != nil {
		st.Ext = slices.Clone(st.Ext)
	}
	return r.Limit.Peek(&st, now, r.Cost)
}

// put records st as key's state, or removes the key when st no longer
// differs from a fresh state. e is the key's entry, nil if it has none. The
// shard lock is held; key is copied if kept.
func (s *Store) put(sh *shard, key string, e *entry, st *algo.State, l *algo.Limit, now int64) {
	exp := l.ExpiresAt(st)
	if exp <= now {
		if e != nil {
			sh.remove(key, e)
			sh.expired++
		}
		return
	}
	if e == nil {
		if s.perShard > 0 && len(sh.m) >= s.perShard {
			sh.evict(now)
		}
		var k string
		e, k = newEntry(key)
		sh.m[k] = e
	}
	sh.save(e, st, exp, l.Algorithm())
}

// evict removes one key of a full shard; see WithMaxKeys.
func (sh *shard) evict(now int64) {
	var victim string
	var ve *entry
	n := 0
	for k, e := range sh.m { // map iteration starts at a random place
		if e.exp() <= now {
			sh.remove(k, e)
			sh.expired++
			return
		}
		if ve == nil || e.exp() < ve.exp() {
			victim, ve = k, e
		}
		if n++; n == evictSamples {
			break
		}
	}
	if ve != nil {
		sh.remove(victim, ve)
		sh.evictions++
	}
}

func checkOne(key string, l *algo.Limit) error {
	if l == nil {
		return errNilLimit
	}
	if key == "" {
		return errEmptyKey
	}
	return nil
}

// Take decides reqs as one all-or-nothing acquisition (see store.Store).
// out must have len(reqs). A single request locks one shard; several lock
// their shards in ascending order, check every request and charge them only
// if all pass. A refused Take charges nothing (see store/storetest for the
// exact rule all stores follow).
func (s *Store) Take(ctx context.Context, reqs []store.Request, out []algo.Decision) (store.Result, error) {
	if err := ctx.Err(); err != nil {
		return store.Result{}, err
	}
	if len(out) != len(reqs) {
		return store.Result{}, errOutLen
	}
	if len(reqs) == 1 {
		r := &reqs[0]
		if err := checkOne(r.Key, r.Limit); err != nil {
			return store.Result{}, err
		}
		if s.closed.Load() {
			return store.Result{}, errClosed
		}
		now := s.now()
		d, err := s.takeOne(r.Key, r.Limit, r.Cost, r.Lease, now)
		out[0] = d
		return store.Result{Allowed: d.Allowed, At: now}, err
	}
	if err := store.Check(reqs, out); err != nil {
		return store.Result{}, fmt.Errorf("memory: %w", err)
	}
	if s.closed.Load() {
		return store.Result{}, errClosed
	}
	now := s.now()
	ok, err := s.takeMany(reqs, out, now)
	return store.Result{Allowed: ok, At: now}, err
}

// TakeKey is Take for one request whose key is prefix+key, decided without
// building that string: the allocation-free path of the limiter package. It
// returns the decision and the store time of the decision (µs), for Refund.
func (s *Store) TakeKey(ctx context.Context, prefix, key string, l *algo.Limit, cost int64, lease uint64) (algo.Decision, int64, error) {
	if err := ctx.Err(); err != nil {
		return algo.Decision{}, 0, err
	}
	var buf [128]byte
	b := append(append(buf[:0], prefix...), key...)
	if len(b) == 0 {
		return algo.Decision{}, 0, errEmptyKey
	}
	// The string aliases buf only for this call: takeOne never keeps its
	// key (put copies the keys it stores), so buf stays on the stack.
	k := unsafe.String(&b[0], len(b))
	if err := checkOne(k, l); err != nil {
		return algo.Decision{}, 0, err
	}
	if s.closed.Load() {
		return algo.Decision{}, 0, errClosed
	}
	now := s.now()
	d, err := s.takeOne(k, l, cost, lease, now)
	return d, now, err
}

func (s *Store) takeOne(key string, l *algo.Limit, cost int64, lease uint64, now int64) (algo.Decision, error) {
	sh := &s.shards[s.shardIndex(key)]
	var st algo.State
	sh.mu.Lock()
	if sh.m == nil {
		sh.mu.Unlock()
		return algo.Decision{}, errClosed
	}
	e := sh.lookup(key, l.Algorithm(), &st, now)
	d := l.TakeLease(&st, now, cost, lease)
	s.put(sh, key, e, &st, l, now)
	sh.mu.Unlock()
	return d, nil
}

// lockShards locks the shards of reqs in ascending order, each once, and
// returns their indexes in the order locked.
func (s *Store) lockShards(reqs []store.Request, buf []int) []int {
	idx := buf[:0]
	for i := range reqs {
		j := s.shardIndex(reqs[i].Key)
		at := len(idx)
		for at > 0 && idx[at-1] > j {
			at--
		}
		if at > 0 && idx[at-1] == j {
			continue
		}
		idx = append(idx, 0)
		copy(idx[at+1:], idx[at:])
		idx[at] = j
	}
	for _, j := range idx {
		s.shards[j].mu.Lock()
	}
	return idx
}

func (s *Store) unlockShards(idx []int) {
	for i := len(idx) - 1; i >= 0; i-- {
		s.shards[idx[i]].mu.Unlock()
	}
}

// hasDuplicateKeys reports whether two requests name the same key.
func hasDuplicateKeys(reqs []store.Request) bool {
	if len(reqs) > 32 {
		seen := make(map[string]struct{}, len(reqs))
		for i := range reqs {
			if _, ok := seen[reqs[i].Key]; ok {
				return true
			}
			seen[reqs[i].Key] = struct{}{}
		}
		return false
	}
	for i := range reqs {
		for j := i + 1; j < len(reqs); j++ {
			if reqs[i].Key == reqs[j].Key {
				return true
			}
		}
	}
	return false
}

func (s *Store) takeMany(reqs []store.Request, out []algo.Decision, now int64) (bool, error) {
	var buf [8]int
	idx := s.lockShards(reqs, buf[:])
	defer s.unlockShards(idx)
	for _, j := range idx {
		if s.shards[j].m == nil {
			return false, errClosed
		}
	}
	if hasDuplicateKeys(reqs) {
		return s.takeSequential(reqs, out, now), nil
	}
	// Distinct keys: the Take of each is exactly its Peek, so peek all and
	// charge only when every one passes.
	ok := true
	for i := range reqs {
		out[i] = s.check(&reqs[i], now)
		ok = ok && out[i].Allowed
	}
	if !ok {
		for i := range reqs {
			out[i] = store.Unwind(out[i], reqs[i].Cost)
		}
		return false, nil
	}
	for i := range reqs {
		r := &reqs[i]
		sh := &s.shards[s.shardIndex(r.Key)]
		var st algo.State
		e := sh.lookup(r.Key, r.Limit.Algorithm(), &st, now)
		out[i] = r.Limit.TakeLease(&st, now, r.Cost, r.Lease)
		s.put(sh, r.Key, e, &st, r.Limit, now)
	}
	return true, nil
}

// check decides r without charging it: a request that passes leaves its
// state as algo Peek does, and one that is refused as its refused algo Take
// does, which starts a fresh bucket's clock. The shard lock is held.
func (s *Store) check(r *store.Request, now int64) algo.Decision {
	sh := &s.shards[s.shardIndex(r.Key)]
	var st algo.State
	e := sh.lookup(r.Key, r.Limit.Algorithm(), &st, now)
	d := r.Limit.Peek(&st, now, r.Cost)
	if !d.Allowed {
		d = r.Limit.TakeLease(&st, now, r.Cost, r.Lease)
	}
	s.put(sh, r.Key, e, &st, r.Limit, now)
	return d
}

// takeSequential decides requests that share keys: each is taken on a copy
// of the state that the earlier requests on its key left, and the copies are
// kept only if all pass. The shard locks are held.
func (s *Store) takeSequential(reqs []store.Request, out []algo.Decision, now int64) bool {
	states := make([]algo.State, len(reqs))
	first := make([]int, len(reqs)) // index of the first request on the same key
	for i := range reqs {
		first[i] = i
		for j := 0; j < i; j++ {
			if reqs[j].Key == reqs[i].Key {
				first[i] = j
				break
			}
		}
		if first[i] == i {
			sh := &s.shards[s.shardIndex(reqs[i].Key)]
			sh.lookup(reqs[i].Key, reqs[i].Limit.Algorithm(), &states[i], now)
			states[i] = states[i].Clone()
		}
	}
	ok := true
	for i := range reqs {
		r := &reqs[i]
		out[i] = r.Limit.TakeLease(&states[first[i]], now, r.Cost, r.Lease)
		if !out[i].Allowed {
			ok = false
			break
		}
	}
	if ok {
		for i := range reqs {
			if first[i] != i {
				continue
			}
			r := &reqs[i]
			sh := &s.shards[s.shardIndex(r.Key)]
			s.put(sh, r.Key, sh.m[r.Key], &states[i], r.Limit, now)
		}
		return true
	}
	for i := range reqs {
		out[i] = store.Unwind(s.check(&reqs[i], now), reqs[i].Cost)
	}
	return false
}

// Peek fills out with the decision Take would make for each request on its
// own. It changes nothing: a missing key is not created and an existing
// one is left as it was.
func (s *Store) Peek(ctx context.Context, reqs []store.Request, out []algo.Decision) error {
	if err := s.begin(ctx, reqs); err != nil {
		return err
	}
	if len(out) != len(reqs) {
		return errOutLen
	}
	now := s.now()
	for i := range reqs {
		sh := &s.shards[s.shardIndex(reqs[i].Key)]
		sh.mu.Lock()
		if sh.m == nil {
			sh.mu.Unlock()
			return errClosed
		}
		out[i] = sh.peek(&reqs[i], now)
		sh.mu.Unlock()
	}
	return nil
}

// Refund gives back units admitted by an earlier Take (Request.At is its
// Result.At; zero means now). Missing keys are skipped.
func (s *Store) Refund(ctx context.Context, reqs []store.Request) error {
	if err := s.begin(ctx, reqs); err != nil {
		return err
	}
	now := s.now()
	for i := range reqs {
		err := s.each(&reqs[i], now, func(st *algo.State, r *store.Request) {
			at := r.At
			if at == 0 {
				at = now
			}
			r.Limit.Refund(st, now, at, r.Cost)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// Release gives back the Concurrency leases named by Request.Lease.
func (s *Store) Release(ctx context.Context, reqs []store.Request) error {
	if err := s.begin(ctx, reqs); err != nil {
		return err
	}
	now := s.now()
	for i := range reqs {
		err := s.each(&reqs[i], now, func(st *algo.State, r *store.Request) {
			r.Limit.Release(st, now, r.Lease)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

func (s *Store) begin(ctx context.Context, reqs []store.Request) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := store.Check(reqs, nil); err != nil {
		return fmt.Errorf("memory: %w", err)
	}
	if s.closed.Load() {
		return errClosed
	}
	return nil
}

// each applies f to r's state under its shard lock and stores the result.
// A key that holds no live state is left alone: there is nothing to give
// back.
func (s *Store) each(r *store.Request, now int64, f func(*algo.State, *store.Request)) error {
	sh := &s.shards[s.shardIndex(r.Key)]
	k := r.Limit.Algorithm()
	var st algo.State
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.m == nil {
		return errClosed
	}
	e := sh.lookup(r.Key, k, &st, now)
	if e == nil || e.kind() != k || e.exp() <= now {
		return nil
	}
	f(&st, r)
	s.put(sh, r.Key, e, &st, r.Limit, now)
	return nil
}

// Reset forgets the keys, as if never used.
func (s *Store) Reset(ctx context.Context, keys ...string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	for _, k := range keys {
		if k == "" {
			return errEmptyKey
		}
	}
	if s.closed.Load() {
		return errClosed
	}
	for _, k := range keys {
		sh := &s.shards[s.shardIndex(k)]
		sh.mu.Lock()
		if sh.m == nil {
			sh.mu.Unlock()
			return errClosed
		}
		if e := sh.m[k]; e != nil {
			sh.remove(k, e)
		}
		sh.mu.Unlock()
	}
	return nil
}

// Inspect returns a copy of key's raw state and whether the key holds one.
// A key whose state has expired reads as missing, as it does for Take.
func (s *Store) Inspect(ctx context.Context, key string) (algo.State, bool, error) {
	if err := ctx.Err(); err != nil {
		return algo.State{}, false, err
	}
	if key == "" {
		return algo.State{}, false, errEmptyKey
	}
	sh := &s.shards[s.shardIndex(key)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.m == nil {
		return algo.State{}, false, errClosed
	}
	e := sh.m[key]
	if e == nil || e.exp() <= s.now() {
		return algo.State{}, false, nil
	}
	var st algo.State
	sh.load(e, &st)
	return st.Clone(), true, nil
}

// Sweep removes every key whose state has expired and returns how many it
// removed. The janitor calls it every sweep interval; it locks one shard at
// a time.
func (s *Store) Sweep() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		now := s.now()
		for k, e := range sh.m {
			if e.exp() <= now {
				sh.remove(k, e)
				sh.expired++
				n++
			}
		}
		sh.mu.Unlock()
	}
	return n
}

func (s *Store) janitor(every time.Duration) {
	defer close(s.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.Sweep()
		}
	}
}

// Stats returns the number of keys and the counts of evictions and
// expirations so far. It locks each shard in turn, so it is a consistent
// count per shard, not a snapshot of the whole store.
func (s *Store) Stats() Stats {
	var st Stats
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		st.Keys += int64(len(sh.m))
		st.Evictions += sh.evictions
		st.Expired += sh.expired
		sh.mu.Unlock()
	}
	return st
}

// Close stops the janitor, waits for it and drops every key. Every method
// then returns an error wrapping store.ErrClosed, Close included.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return errClosed
	}
	if s.stop != nil {
		close(s.stop)
		<-s.done
	}
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		sh.m, sh.ext = nil, nil
		sh.mu.Unlock()
	}
	return nil
}
