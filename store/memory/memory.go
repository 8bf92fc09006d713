package memory

import (
	"cmp"
	"context"
	"fmt"
	"hash/maphash"
	"slices"
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
	perShard int   // key cap per shard; 0: none
	maxKeys  int64 // the cap asked for (WithMaxKeys)

	closed atomic.Bool
	stop   chan struct{}
	done   chan struct{}
}

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
	// MaxKeys is the cap WithMaxKeys set; 0: none.
	MaxKeys int64
}

var (
	errClosed   error = closedError{}
	errOutLen         = fmt.Errorf("memory: %w: out must have one decision per request", store.ErrBadRequest)
	errEmptyKey       = fmt.Errorf("memory: %w: empty key", store.ErrBadRequest)
	errNilLimit       = fmt.Errorf("memory: %w: nil limit", store.ErrBadRequest)

	_ store.Store     = (*Store)(nil)
	_ store.Inspector = (*Store)(nil)
)

// closedError is what every method but Close returns after Close: it
// matches store.ErrClosed, and says "memory store: closed" instead of
// "memory: " followed by the sentinel's own "store: closed".
type closedError struct{}

func (closedError) Error() string { return "memory store: closed" }
func (closedError) Unwrap() error { return store.ErrClosed }

// New returns an empty store. Options and their defaults:
//
//   - WithClock: the wall clock at New plus monotonic time since.
//   - WithShards: DefaultShards (256), rounded up to a power of two.
//   - WithMaxKeys: DefaultMaxKeys (1,000,000); WithMaxKeys(0) for no cap.
//   - WithSweepInterval: DefaultSweepInterval (1 minute); 0 disables the janitor.
//
// A nil Option is ignored. It returns an error wrapping ErrInvalidOption
// for an option out of range. Close the store to stop its janitor.
func New(opts ...Option) (*Store, error) {
	c := config{shards: DefaultShards, maxKeys: DefaultMaxKeys, sweep: DefaultSweepInterval}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	n := ceilPow2(c.shards)
	if c.maxKeys > 0 && !c.shardsSet {
		for n > 1 && c.maxKeys/n < minKeysPerShard {
			n >>= 1
		}
	}
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
		s.maxKeys = int64(c.maxKeys)
	}
	for i := range s.shards {
		s.shards[i].tab.Store(newTable(8))
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

// hash returns key's hashKey (see table.go) and its shard.
func (s *Store) hash(key string) (uint64, *shard) {
	h := maphash.String(s.seed, key)
	return hashKey(h, key), &s.shards[h&s.mask]
}

// acquire returns key's entry, locked and in the table, creating it if
// need be (create false: nil for a missing key), its shard and its
// hashKey, or errClosed.
func (s *Store) acquire(key string, create bool, now int64) (*entry, *shard, uint64, error) {
	hk, sh := s.hash(key)
	for {
		e := sh.find(hk, key)
		if e == nil {
			if !create {
				if sh.tab.Load() == nil {
					return nil, sh, hk, errClosed
				}
				return nil, sh, hk, nil
			}
			var ok bool
			if e, ok = sh.insert(hk, key, s.perShard, now); !ok {
				return nil, sh, hk, errClosed
			}
		}
		e.mu.Lock()
		if !e.dead() {
			return e, sh, hk, nil
		}
		e.mu.Unlock() // removed meanwhile: look again
	}
}

// load returns e's state: zero when it was written by another algorithm
// (its limit was reconfigured) or has expired, whether or not the janitor
// has removed it yet, so that decisions do not depend on when it runs.
// It reports false, with the state incomplete, when Close has dropped the
// state's variable part (the side map) meanwhile: the caller returns
// errClosed rather than decide on what is left (a concurrency key's
// leases gone, its slots all free). e.mu is held.
func (sh *shard) load(e *entry, k algo.Kind, st *algo.State, now int64) bool {
	if e.kind() != k || e.exp() <= now {
		return true
	}
	st.A, st.B, st.C = e.a, e.b, e.c
	if e.ext() {
		sh.extMu.Lock()
		ext := sh.ext
		st.Ext = ext[e]
		sh.extMu.Unlock()
		return ext != nil
	}
	return true
}

// save stores st in e and reports whether st still differs from a fresh
// state; when it does not, the caller removes the key (see release).
// e.mu is held.
func (sh *shard) save(e *entry, st *algo.State, l *algo.Limit, now int64) bool {
	exp := l.ExpiresAt(st)
	e.a, e.b, e.c = st.A, st.B, st.C
	meta := uint64(min(max(exp, 0), expMask)) | uint64(l.Algorithm())<<kindShift
	switch {
	case st.Ext != nil:
		sh.extMu.Lock()
		if sh.ext != nil { // nil: Close dropped every key while this call decided
			sh.ext[e] = st.Ext
		}
		sh.extMu.Unlock()
		meta |= hasExt
	case e.ext():
		sh.extMu.Lock()
		delete(sh.ext, e)
		sh.extMu.Unlock()
	}
	e.meta = meta
	return exp > now
}

// release unlocks e and, if its state no longer differs from a fresh one,
// removes the key: a decision that leaves nothing to remember leaves no key.
// hk is e's hashKey.
func (s *Store) release(sh *shard, e *entry, hk uint64, live bool, now int64) {
	e.mu.Unlock()
	if !live {
		s.removeFresh(sh, e, hk, now)
	}
}

// removeFresh removes e, unlocked, if its state is as good as fresh.
func (s *Store) removeFresh(sh *shard, e *entry, hk uint64, now int64) {
	sh.removeIf(e, hk, true, func(e *entry) bool { return e.exp() <= now })
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
// out must have len(reqs). A single request locks its key; several lock
// their keys in a fixed order (by address), check every request and charge
// them only if all pass. A refused Take charges nothing (see
// store/storetest for the exact rule all stores follow).
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
		if r.Cost < 0 {
			return store.Result{}, store.NegativeCost(0, r.Key, r.Cost)
		}
		if s.closed.Load() {
			return store.Result{}, errClosed
		}
		at, err := s.takeOne(&out[0], r.Key, r.Limit, r.Cost, r.Lease, s.now())
		return store.Result{Allowed: out[0].Allowed, At: at}, err
	}
	if err := store.Check(reqs, out); err != nil {
		return store.Result{}, fmt.Errorf("memory: %w", err)
	}
	if s.closed.Load() {
		return store.Result{}, errClosed
	}
	ok, at, err := s.takeMany(ctx, reqs, out, s.now())
	return store.Result{Allowed: ok, At: at}, err
}

// TakeKey is Take for one request whose key is prefix+key, decided without
// building that string: the allocation-free path of the limiter package. It
// writes the decision into *d (the zero Decision on an error) and returns
// the store time of the decision (µs), for Refund. The decision is written
// in place because an algo.Decision returned by value is copied through
// memory at every call it passes (see algo.Limit.TakeLeaseTo).
func (s *Store) TakeKey(ctx context.Context, d *algo.Decision, prefix, key string, l *algo.Limit, cost int64, lease uint64) (int64, error) {
	*d = algo.Decision{}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	var buf [128]byte
	b := append(append(buf[:0], prefix...), key...)
	if len(b) == 0 {
		return 0, errEmptyKey
	}
	// The string aliases buf only for this call: takeOne never keeps its
	// key (a new entry copies it), so buf stays on the stack.
	k := unsafe.String(&b[0], len(b))
	if err := checkOne(k, l); err != nil {
		return 0, err
	}
	if cost < 0 {
		return 0, store.NegativeCost(0, prefix+key, cost) // not k: it would move buf to the heap
	}
	if s.closed.Load() {
		return 0, errClosed
	}
	return s.takeOne(d, k, l, cost, lease, s.now())
}

// takeOne decides one request and writes the decision into d, in place:
// an algo.Decision returned by value through a chain of calls is copied
// through memory at each (see algo.Limit.TakeLeaseTo).
//
// It returns the time the decision was made at: now, or the later time the
// key's state had already seen (a take that read the clock before another
// and locked the key after it), at which the algorithm decides and stamps
// what it charges. A refund at the earlier now would look for a fixed
// window's units in the window before the one that counted them.
func (s *Store) takeOne(d *algo.Decision, key string, l *algo.Limit, cost int64, lease uint64, now int64) (int64, error) {
	h := maphash.String(s.seed, key) // s.hash, by hand: it is not inlined
	hk, sh := hashKey(h, key), &s.shards[h&s.mask]
	kind := l.Algorithm()
	for {
		e := sh.findLocked(hk, key)
		if e == nil {
			done, err := s.takeNew(d, sh, hk, key, l, cost, lease, now)
			if done || err != nil {
				return now, err
			}
			continue // inserted meanwhile
		}
		if e.dead() {
			e.mu.Unlock()
			continue
		}
		// sh.load and sh.save, by hand for a state without Ext.
		var st algo.State
		m := e.meta
		if m&hasExt != 0 {
			if !sh.load(e, kind, &st, now) {
				e.mu.Unlock()
				return 0, errClosed
			}
		} else if algo.Kind(m>>kindShift) == kind && int64(m&expMask) > now {
			st.A, st.B, st.C = e.a, e.b, e.c
		}
		l.TakeLeaseTo(d, &st, now, cost, lease)
		at := max(now, l.Seen(&st))
		if st.Ext != nil || m&hasExt != 0 {
			s.release(sh, e, hk, sh.save(e, &st, l, now), now)
			return at, nil
		}
		exp := l.ExpiresAt(&st)
		e.a, e.b, e.c = st.A, st.B, st.C
		e.meta = uint64(min(max(exp, 0), expMask)) | uint64(kind)<<kindShift
		e.mu.Unlock()
		if exp <= now {
			s.removeFresh(sh, e, hk, now)
		}
		return at, nil
	}
}

// takeNew decides a request on a key the table does not hold, under the
// shard's writer lock, which every other decision on a missing key of the
// shard also takes: the key is created only if the decision leaves a state
// worth keeping (a refused or zero-cost request on a fresh key leaves
// none, and evicts nobody). done is false if the key appeared meanwhile.
func (s *Store) takeNew(d *algo.Decision, sh *shard, hk uint64, key string, l *algo.Limit, cost int64, lease uint64, now int64) (done bool, err error) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.tab.Load() == nil {
		return true, errClosed
	}
	if sh.find(hk, key) != nil {
		return false, nil
	}
	var st algo.State
	l.TakeLeaseTo(d, &st, now, cost, lease)
	if l.ExpiresAt(&st) > now {
		e := newEntry(key)
		sh.save(e, &st, l, now) // before anyone can find it
		sh.add(e, hk, s.perShard, now)
	}
	return true, nil
}

// held is one key of a Take over several requests.
type held struct {
	e  *entry
	sh *shard
	hk uint64
}

// lockAll returns the entries of reqs, each locked once, in ascending
// order of address — the order every Take over several keys locks in, so
// that two of them cannot deadlock — and for each request the index of its
// entry.
func (s *Store) lockAll(ctx context.Context, reqs []store.Request, now int64, idx []int) ([]held, error) {
	var hs []held
	for {
		if err := ctx.Err(); err != nil {
			dropPending(hs)
			return nil, err
		}
		hs = make([]held, 0, len(reqs))
		for i := range reqs {
			e, sh, hk, err := s.acquire(reqs[i].Key, true, now)
			if err != nil {
				dropPending(hs)
				return nil, err
			}
			e.mu.Unlock()
			hs = append(hs, held{e, sh, hk})
		}
		order := make([]held, 0, len(hs))
		for _, h := range hs {
			if !slices.ContainsFunc(order, func(o held) bool { return o.e == h.e }) {
				order = append(order, h)
			}
		}
		slices.SortFunc(order, func(a, b held) int {
			return cmp.Compare(uintptr(unsafe.Pointer(a.e)), uintptr(unsafe.Pointer(b.e)))
		})
		dead := false
		for i, h := range order {
			h.e.mu.Lock()
			if h.e.dead() {
				for _, u := range order[:i+1] {
					u.e.mu.Unlock()
				}
				dead = true
				break
			}
		}
		if dead {
			continue // a key was removed between the lookup and the lock
		}
		for i, h := range hs {
			idx[i] = slices.IndexFunc(order, func(o held) bool { return o.e == h.e })
		}
		return order, nil
	}
}

// dropPending removes the keys of hs that are still pending (see insert)
// when the Take that looked them up gives up: no Take would ever save them,
// and neither eviction nor Sweep removes a pending key. A Take that found
// one meanwhile sees it removed and looks its keys up again.
func dropPending(hs []held) {
	for _, h := range hs {
		h.sh.removeIf(h.e, h.hk, false, (*entry).undecided)
	}
}

func (s *Store) takeMany(ctx context.Context, reqs []store.Request, out []algo.Decision, now int64) (bool, int64, error) {
	idx := make([]int, len(reqs))
	order, err := s.lockAll(ctx, reqs, now, idx)
	if err != nil {
		return false, now, err
	}
	// Read the clock again with every key held: a take of one of them
	// that read its clock after ours but locked the key first has left
	// its later instant in the state, at which ours is then decided (a
	// state's time never moves back), and reporting ours would send a
	// refund to a fixed window before the one that counted it (see
	// takeOne). Every decision held before read its clock before this.
	now = max(now, s.now())
	states := make([]algo.State, len(order))
	for j, h := range order {
		if !h.sh.load(h.e, reqs[slices.Index(idx, j)].Limit.Algorithm(), &states[j], now) {
			for _, h := range order {
				h.e.mu.Unlock()
			}
			return false, now, errClosed
		}
		states[j] = states[j].Clone()
	}
	// Take each request on a copy of the state the earlier requests on its
	// key left; keep the copies only if all pass.
	work := make([]algo.State, len(order))
	for j := range states {
		work[j] = states[j].Clone()
	}
	ok := true
	for i := range reqs {
		r := &reqs[i]
		out[i] = r.Limit.TakeLease(&work[idx[i]], now, r.Cost, r.Lease)
		if !out[i].Allowed {
			ok = false
			break
		}
	}
	live := make([]bool, len(order))
	if ok {
		for j, h := range order {
			live[j] = h.sh.save(h.e, &work[j], reqs[slices.Index(idx, j)].Limit, now)
		}
	} else {
		// Nothing is charged: each request is decided alone on the state
		// as it was, which keeps what its Peek — or, refused alone, its
		// refused Take — leaves.
		for i := range reqs {
			r := &reqs[i]
			st := &states[idx[i]]
			d := r.Limit.Peek(st, now, r.Cost)
			if !d.Allowed {
				d = r.Limit.TakeLease(st, now, r.Cost, r.Lease)
			}
			out[i] = store.Unwind(d, r.Cost)
		}
		for j, h := range order {
			live[j] = h.sh.save(h.e, &states[j], reqs[slices.Index(idx, j)].Limit, now)
		}
	}
	// Unlock every key before removing the ones left fresh: a removal takes
	// the shard's lock, which must never wait while a key's lock is held.
	for _, h := range order {
		h.e.mu.Unlock()
	}
	for j, h := range order {
		if !live[j] {
			h.e.mu.Lock()
			s.release(h.sh, h.e, h.hk, false, now)
		}
	}
	return ok, now, nil
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
		r := &reqs[i]
		e, sh, _, err := s.acquire(r.Key, false, now)
		if err != nil {
			return err
		}
		var st algo.State
		if e != nil {
			if !sh.load(e, r.Limit.Algorithm(), &st, now) {
				e.mu.Unlock()
				return errClosed
			}
			st.Ext = slices.Clone(st.Ext) // Peek forgets expired entries in place
			e.mu.Unlock()
		}
		out[i] = r.Limit.Peek(&st, now, r.Cost)
	}
	return nil
}

// Refund gives back units admitted by an earlier Take (Request.At is its
// Result.At; zero means now). Missing keys are skipped.
func (s *Store) Refund(ctx context.Context, reqs []store.Request) error {
	return s.eachRequest(ctx, reqs, func(st *algo.State, r *store.Request, now int64) {
		at := r.At
		if at == 0 {
			at = now
		}
		r.Limit.Refund(st, now, at, r.Cost)
	})
}

// Release gives back the Concurrency leases named by Request.Lease.
func (s *Store) Release(ctx context.Context, reqs []store.Request) error {
	return s.eachRequest(ctx, reqs, func(st *algo.State, r *store.Request, now int64) {
		r.Limit.Release(st, now, r.Lease)
	})
}

// Renew extends the Concurrency leases named by Request.Lease to expire
// their limit's LeaseTTL from now (store.Renewer). A lease that has expired
// or been released is not revived.
func (s *Store) Renew(ctx context.Context, reqs []store.Request) error {
	return s.eachRequest(ctx, reqs, func(st *algo.State, r *store.Request, now int64) {
		r.Limit.Renew(st, now, r.Lease)
	})
}

// eachRequest applies f to the live state of each request's key at one
// now, as each does: the common body of Refund, Release and Renew.
func (s *Store) eachRequest(ctx context.Context, reqs []store.Request, f func(*algo.State, *store.Request, int64)) error {
	if err := s.begin(ctx, reqs); err != nil {
		return err
	}
	now := s.now()
	for i := range reqs {
		if err := s.each(&reqs[i], now, func(st *algo.State, r *store.Request) { f(st, r, now) }); err != nil {
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

// each applies f to r's state under its lock and stores the result. A key
// that holds no live state is left alone: there is nothing to give back.
func (s *Store) each(r *store.Request, now int64, f func(*algo.State, *store.Request)) error {
	e, sh, hk, err := s.acquire(r.Key, false, now)
	if err != nil || e == nil {
		return err
	}
	k := r.Limit.Algorithm()
	if e.kind() != k || e.exp() <= now {
		e.mu.Unlock()
		return nil
	}
	var st algo.State
	if !sh.load(e, k, &st, now) {
		e.mu.Unlock()
		return errClosed
	}
	f(&st, r)
	s.release(sh, e, hk, sh.save(e, &st, r.Limit, now), now)
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
		hk, sh := s.hash(k)
		sh.mu.Lock()
		if sh.tab.Load() == nil {
			sh.mu.Unlock()
			return errClosed
		}
		if e := sh.find(hk, k); e != nil {
			e.mu.Lock()
			sh.remove(e, hk)
			e.mu.Unlock()
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
	now := s.now()
	e, sh, _, err := s.acquire(key, false, now)
	if err != nil || e == nil {
		return algo.State{}, false, err
	}
	defer e.mu.Unlock()
	if e.exp() <= now {
		return algo.State{}, false, nil
	}
	var st algo.State
	if !sh.load(e, e.kind(), &st, now) {
		return algo.State{}, false, errClosed
	}
	return st.Clone(), true, nil
}

// Sweep removes every key whose state has expired and returns how many it
// removed. The janitor calls it every sweep interval. It holds one shard's
// writer lock at a time, which delays only new keys of that shard, and
// each key's lock for an instant; it shrinks tables that emptied.
func (s *Store) Sweep() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		t := sh.tab.Load()
		if t == nil {
			sh.mu.Unlock()
			continue
		}
		now := s.now()
		for j := range t.slots {
			e := t.slots[j].e.Load()
			if e == nil || e == tomb {
				continue
			}
			e.mu.Lock()
			if e.exp() <= now && !e.undecided() {
				sh.remove(e, t.slots[j].hk.Load())
				sh.expired++
				n++
			}
			e.mu.Unlock()
		}
		if sh.tombs > 0 && (sh.tombs >= sh.live || sh.live*8 < len(t.slots)) {
			sh.rebuild() // drop the tombstones, shrink an emptied table
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
	st := Stats{MaxKeys: s.maxKeys}
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		st.Keys += int64(sh.live)
		st.Evictions += sh.evictions
		st.Expired += sh.expired
		sh.mu.Unlock()
	}
	return st
}

// Close stops the janitor, waits for it and drops every key. Every other
// method then returns an error wrapping store.ErrClosed; a second Close
// returns nil, as every store's does.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil // closed already, as every store's second Close
	}
	if s.stop != nil {
		close(s.stop)
		<-s.done
	}
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		sh.tab.Store(nil)
		sh.live, sh.tombs = 0, 0
		sh.extMu.Lock()
		sh.ext = nil
		sh.extMu.Unlock()
		sh.mu.Unlock()
	}
	return nil
}
