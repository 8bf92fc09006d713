package memcached

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"strings"
	"sync"

	"github.com/bradfitz/gomemcache/memcache"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/store"
)

// Every algorithm but the two window counters keeps its algo.State in one
// item: a byte naming the algorithm, the state's ExpiresAt (varint µs),
// then State.MarshalBinary. A decision reads it with gets (value and CAS
// id), runs the algo package's pure function, and writes the new state back
// with cas (or add for a new key) only if no one wrote in between; a lost
// race re-reads and decides again, after a jittered backoff, up to the
// configured retries. A refusal writes nothing, so only admissions contend.
// A state whose ExpiresAt has passed on the store's clock, or that names
// another algorithm (the limit's algorithm was changed), reads as fresh;
// memcached's own TTL removes it later.

// encodeState appends the item value of st to b.
func encodeState(b []byte, l *algo.Limit, st *algo.State) []byte {
	b = append(b, byte(l.Algorithm()))
	b = binary.AppendVarint(b, l.ExpiresAt(st))
	b, _ = st.AppendBinary(b)
	return b
}

// decodeState splits an item value into its algorithm, expiry and state.
func decodeState(v []byte, st *algo.State) (algo.Kind, int64, error) {
	if len(v) < 2 {
		return 0, 0, fmt.Errorf("%w: %d-byte item", algo.ErrBadState, len(v))
	}
	exp, n := binary.Varint(v[1:])
	if n <= 0 {
		return 0, 0, fmt.Errorf("%w: bad expiry", algo.ErrBadState)
	}
	return algo.Kind(v[0]), exp, st.UnmarshalBinary(v[1+n:])
}

// load reads key's compare-and-swap state for l at now: the state (zero
// when missing, expired or of another algorithm), the item (nil when
// missing), whether it exists, and whether it holds a live state of l's
// algorithm.
func (s *Store) load(key string, l *algo.Limit, now int64) (st algo.State, it *memcache.Item, exists, live bool, err error) {
	it, err = s.mc.Get(s.keys.state(key))
	if errors.Is(err, memcache.ErrCacheMiss) {
		return st, nil, false, false, nil
	}
	if err != nil {
		return st, nil, false, false, s.unavailable("read", key, err)
	}
	if st, live, err = s.itemState(key, l, now, it.Value, it.CasID); err != nil {
		return algo.State{}, nil, false, false, err
	}
	return st, it, true, live, nil
}

// itemState reads val, the value of key's state item, and casID, its CAS
// id, as l's state at now: the state (zero when expired or of another
// algorithm) and whether it is a live state of l's algorithm.
func (s *Store) itemState(key string, l *algo.Limit, now int64, val []byte, casID uint64) (st algo.State, live bool, err error) {
	if casID == 0 {
		// memcached numbers items from 1; 0 is what a server with
		// compare-and-swap disabled gives, and no cas would ever land.
		return st, false, fmt.Errorf("%w: memcached: key %q: server %s gave no CAS id: it runs with compare-and-swap disabled (-C), which the %s algorithm needs; restart it without -C",
			store.ErrUnavailable, key, s.ServerFor(key), l.Algorithm())
	}
	kind, exp, err := decodeState(val, &st)
	if err != nil {
		return algo.State{}, false, fmt.Errorf("memcached: key %q holds a malformed state (Reset it): %w", key, err)
	}
	if kind != l.Algorithm() || exp <= now {
		return algo.State{}, false, nil
	}
	return st, true, nil
}

// writeMode says whether and how update writes the state op left.
type writeMode uint8

const (
	// noWrite leaves the item as it is.
	noWrite writeMode = iota
	// tryWrite writes once: a lost race is fine, since the decision
	// charged nothing (a refusal, or a take of cost 0, storing what the
	// algorithm's Take left, e.g. a fresh bucket's clock).
	tryWrite
	// mustWrite retries until the write lands or the retries run out.
	mustWrite
)

// must is mustWrite when b, else noWrite.
func must(b bool) writeMode {
	if b {
		return mustWrite
	}
	return noWrite
}

// update applies op to key's state under compare-and-swap: op gets the
// state and whether the item holds a live state of l's algorithm (refunds
// and releases give nothing back otherwise, and must not overwrite another
// limit's state with a fresh one), and returns the decision and how to
// write the state back. A state that did not change, or a fresh one for a
// missing item, is not written. The write carries the expiry l.ExpiresAt
// gives. After retries lost races the result is an error wrapping
// store.ErrContention, and nothing was written.
//
// Within the process, callers of one key queue on a local lock rather than
// race: compare-and-swap retries are only spent against other processes. A
// caller whose context has ended by the time it has the lock returns the
// context's error, nothing read or written.
//
// *now is the time of the operation (op reads it there). The clock is read
// again after each read of the item, and *now moved up to it: a time read
// before the item, before a wait behind this process's other callers of
// the key or another process's write that won the race, may lie before
// the time the state has already seen, and the algorithm would decide at
// that later time (a state's time never moves back) while the caller
// keeps the earlier one. A sliding log stamps its units with the time it
// decides at, and a refund at the caller's time found none of them (738
// of 1600 refunds were lost under 16 goroutines on two clients).
func (s *Store) update(ctx context.Context, key string, l *algo.Limit, now *int64, retries int,
	op func(st *algo.State, live bool) (algo.Decision, writeMode)) (algo.Decision, error) {
	mu := s.lockFor(key)
	mu.Lock()
	defer mu.Unlock()
	// The wait for the lock may have outlasted the caller (behind a
	// server that hangs, one round trip timeout per caller ahead): its
	// failure policy has answered it, and what it would charge now no
	// caller is admitted with.
	if err := ctx.Err(); err != nil {
		return algo.Decision{}, err
	}
	mkey := s.keys.state(key)
	for attempt := 0; ; attempt++ {
		it, err := s.mc.Get(mkey)
		// The clock is read after the item: a write it holds came before.
		*now = max(*now, s.nowUS())
		var st algo.State
		exists, live := err == nil, false
		switch {
		case errors.Is(err, memcache.ErrCacheMiss):
		case err != nil:
			return algo.Decision{}, s.unavailable("read", key, err)
		default:
			if st, live, err = s.itemState(key, l, *now, it.Value, it.CasID); err != nil {
				return algo.Decision{}, err
			}
		}
		var val []byte // what to write
		d, mode := op(&st, live)
		exp := int64(0)
		if mode != noWrite {
			exp = l.ExpiresAt(&st)
			val = encodeState(make([]byte, 0, 40+9*len(st.Ext)), l, &st)
			if exists && bytes.Equal(val, it.Value) || !exists && exp <= *now {
				mode = noWrite // nothing to store
			}
		}
		if mode == noWrite {
			s.stats.casOps.Add(1)
			return d, nil
		}
		if len(val)+len(mkey)+itemOverhead > s.cfg.maxItemSize {
			return algo.Decision{}, s.tooLarge(key, l, len(val), nil)
		}
		item := &memcache.Item{Key: mkey, Value: val, Expiration: s.expiration(exp, *now)}
		if exists {
			item.CasID = it.CasID
			err = s.mc.CompareAndSwap(item)
		} else {
			err = s.mc.Add(item)
		}
		switch {
		case err == nil:
			s.stats.casOps.Add(1)
			return d, nil
		case errors.Is(err, memcache.ErrCASConflict), errors.Is(err, memcache.ErrNotStored), errors.Is(err, memcache.ErrCacheMiss):
			// Someone wrote, created or removed the item since we read it.
		case isTooLarge(err):
			// The server's -I is below what Open found (it was
			// restarted with another one since).
			return algo.Decision{}, s.tooLarge(key, l, len(val), err)
		case mode == tryWrite:
			// The decision charges nothing and was made on what the
			// server answered: the server failing on the write that
			// only stores what the algorithm left does not undo it (a
			// refusal reported as an error alone is answered by the
			// caller's failure policy, which failing open admits).
			s.stats.casOps.Add(1)
			return d, nil
		default:
			return algo.Decision{}, s.unavailable("write", key, err)
		}
		if mode == tryWrite {
			s.stats.casOps.Add(1)
			return d, nil
		}
		if attempt >= retries {
			s.stats.contention.Add(1)
			return algo.Decision{}, fmt.Errorf("%w: memcached: key %q: %d compare-and-swap attempts lost to concurrent writers; nothing was charged",
				store.ErrContention, key, attempt+1)
		}
		s.stats.casRetries.Add(1)
		if err := s.backoff(ctx, attempt); err != nil {
			return algo.Decision{}, err
		}
	}
}

// itemOverhead is what memcached adds to a key and a value against its
// item size limit: the item header (48 bytes on 64-bit), the CAS id (8),
// the key's terminating NUL and the value's CRLF, rounded up.
const itemOverhead = 64

// tooLarge is the error of a state that does not fit in one item: the
// caller's rule asks more than memcached can hold, so it wraps
// store.ErrBadRequest (no failure policy admits it, no breaker counts it).
// serverErr is the server's refusal, when it is the server that refused.
func (s *Store) tooLarge(key string, l *algo.Limit, size int, serverErr error) error {
	const advice = "lower the rule's limit, use a sliding_window, or raise memcached's -I"
	if serverErr != nil {
		return fmt.Errorf("%w: memcached: key %q: server %s refused the %s state of %d bytes as over its item size limit (-I; the store opened with %d bytes): %s: %w",
			store.ErrBadRequest, key, s.ServerFor(key), l.Algorithm(), size, s.cfg.maxItemSize, advice, serverErr)
	}
	return fmt.Errorf("%w: memcached: key %q: the %s state is %d bytes, over the item size limit of %d bytes with the key and the item header (the servers' -I, WithMaxItemSize): %s",
		store.ErrBadRequest, key, l.Algorithm(), size, s.cfg.maxItemSize, advice)
}

// isTooLarge reports the server's refusal of an item over its -I
// ("SERVER_ERROR object too large for cache").
func isTooLarge(err error) bool {
	return err != nil && strings.Contains(err.Error(), "object too large")
}

// lockStripes is the number of local locks keys are spread over: enough
// that unrelated keys rarely share one.
const lockStripes = 4096

// lockFor returns the local lock of key.
func (s *Store) lockFor(key string) *sync.Mutex {
	return &s.locks[s.lockIndex(key)]
}

// lockIndex is the index of key's local lock.
func (s *Store) lockIndex(key string) int {
	return int(maphash.String(s.seed, key) % lockStripes)
}
