package main

import (
	"context"
	"fmt"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/policy"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/memcached"
)

// memcachedItemWarnings returns a warning for each rule of cfg whose state
// can outgrow one item of the memcached store under st: a sliding log or
// concurrency limit keeps per-unit state in one item, and a key's state
// over the servers' item size limit (-I) fails its decisions with a bad
// request, which no failure policy answers. The configuration itself is
// valid (floodgate validate knows no store), so serve says it at start
// and at every reload rather than at the first key to fill up. The store
// under st is not a memcached one, or not open yet (--start-degraded, see
// warnItemSizeOnOpen): nothing to say.
func memcachedItemWarnings(st store.Store, cfg *policy.Config, storeFlag string) []string {
	ms, ok, _ := store.Under[*memcached.Store](st)
	if !ok {
		return nil
	}
	itemSize := ms.MaxItemSize()
	var out []string
	for _, r := range cfg.Rules() {
		l := r.Limit()
		if l == nil {
			continue // unlimited or deny: no state
		}
		size := ms.MaxStateSize(l)
		if size <= itemSize {
			continue
		}
		what := "units"
		if l.Algorithm() == algo.Concurrency {
			what = "slots"
		}
		out = append(out, fmt.Sprintf("%s: rule %s/%s (%s), %s with a limit of %d %s, keeps up to %d bytes a key in one memcached item (key and item header included), "+
			"over the servers' item size limit of %d bytes: a key whose state outgrows it fails its decisions (bad request, whatever --on-store-error says); "+
			"raise memcached's -I, lower the limit, or use another algorithm, e.g. sliding_window (docs/STORES.md)",
			storeFlag, r.Domain, r.Name, r.Pos, l.Algorithm(), l.Params().Limit, what, size, itemSize))
	}
	return out
}

// warnItemSizeOnOpen gives memcachedItemWarnings for the rules in force
// (config) once a store that --start-degraded opens in the background is
// open: at start there was no ring to ask for its item size. It looks
// every second until then, or until ctx is done; a store open already
// was judged at start, and it returns at once.
func warnItemSizeOnOpen(ctx context.Context, st store.Store, config func() *policy.Config, storeFlag string, warn func(string)) {
	if _, _, whole := store.Under[*memcached.Store](st); whole {
		return
	}
	if !waitOpened(ctx, st) {
		return
	}
	for _, w := range memcachedItemWarnings(st, config(), storeFlag) {
		warn(w)
	}
}

// noStore is implemented by no store: store.Under[noStore] walks a
// store's whole chain of wrappers, and says whether it is whole.
type noStore interface{ noStore() }

// waitOpened waits until st's chain of wrappers is whole (a store opened
// in the background by --start-degraded has opened; see store.Under),
// looking every second, and reports whether it is, false when ctx ends
// first.
func waitOpened(ctx context.Context, st store.Store) bool {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		if _, _, whole := store.Under[noStore](st); whole {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
}
