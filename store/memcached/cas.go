package memcached

import (
	"context"
	"errors"
	"fmt"

	"github.com/bradfitz/gomemcache/memcache"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/store"
)

// Every algorithm but the two window counters keeps its algo.State in one
// item: a byte naming the algorithm, then State.MarshalBinary. A decision
// reads it with gets (value and CAS id), runs the algo package's pure
// function, and writes the new state back with cas (or add for a new key)
// only if no one wrote in between; a lost race re-reads and decides again,
// after a jittered backoff, up to the configured retries. A refusal writes
// nothing, so only admissions contend. An item naming another algorithm
// (the limit's algorithm was changed) is read as a fresh state.

// load reads key's compare-and-swap state for l: the state (zero when
// missing or of another algorithm), the item (nil when missing) and whether
// it exists.
func (s *Store) load(key string, l *algo.Limit) (algo.State, *memcache.Item, bool, error) {
	var st algo.State
	it, err := s.mc.Get(s.keys.state(key))
	if errors.Is(err, memcache.ErrCacheMiss) {
		return st, nil, false, nil
	}
	if err != nil {
		return st, nil, false, unavailable("read", key, err)
	}
	if len(it.Value) == 0 || it.Value[0] != byte(l.Algorithm()) {
		return st, it, true, nil
	}
	if err := st.UnmarshalBinary(it.Value[1:]); err != nil {
		return algo.State{}, nil, false, fmt.Errorf("memcached: key %q holds a malformed state (Reset it): %w", key, err)
	}
	return st, it, true, nil
}

// update applies op to key's state under compare-and-swap: op gets the
// state and whether the item exists, and returns the decision and whether
// to write the state back. The write carries the expiry l.ExpiresAt gives.
// After retries lost races the result is an error wrapping
// store.ErrContention, and nothing was written.
func (s *Store) update(ctx context.Context, key string, l *algo.Limit, now int64, retries int,
	op func(st *algo.State, exists bool) (algo.Decision, bool)) (algo.Decision, error) {
	mkey := s.keys.state(key)
	for attempt := 0; ; attempt++ {
		st, it, exists, err := s.load(key, l)
		if err != nil {
			return algo.Decision{}, err
		}
		d, write := op(&st, exists)
		if !write {
			s.stats.casOps.Add(1)
			return d, nil
		}
		val := make([]byte, 1, 32+8*len(st.Ext))
		val[0] = byte(l.Algorithm())
		val, _ = st.AppendBinary(val)
		if len(val)+len(mkey) > s.cfg.maxItemSize {
			return algo.Decision{}, fmt.Errorf("%w: memcached: key %q: the %s state is %d bytes, over the item size limit %d (see WithMaxItemSize; use a sliding_window or a lower limit)",
				store.ErrBadRequest, key, l.Algorithm(), len(val), s.cfg.maxItemSize)
		}
		item := &memcache.Item{Key: mkey, Value: val, Expiration: s.expiration(l.ExpiresAt(&st), now)}
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
		default:
			return algo.Decision{}, unavailable("write", key, err)
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
