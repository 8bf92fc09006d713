package main

import (
	"context"
	"fmt"
	"time"

	"github.com/floodgate/floodgate/store/memory"
)

const (
	// evictionPoll is how often serve reads the memory store's eviction
	// count: Stats locks each shard in turn, for a moment each.
	evictionPoll = 2 * time.Second
	// evictionWarnEvery bounds the memory store's eviction WARNs: a cap
	// below the working set evicts on every new key, and one line a
	// minute, with the count, says so without flooding the log.
	evictionWarnEvery = time.Minute
)

// evictionWatch decides serve's WARNs about the memory store's evictions
// of live keys (memory.Stats.Evictions: keys whose state had not expired,
// removed to keep under the max_keys cap). Each such key comes back with a
// fresh budget, so its limits admit more than configured, and nothing
// else says so but the floodgate_memory_evictions_total metric.
type evictionWatch struct {
	store  string    // the --store flag, as the WARN names it
	warned int64     // Stats.Evictions at the last WARN (0 at start)
	at     time.Time // when the last WARN was said; zero: none yet
}

// check returns the WARN due for st, read at now: when keys were evicted
// since the last one and it is at least evictionWarnEvery old (or there
// was none). The WARN counts the evictions since the last one, so that
// none goes unsaid and none is said twice.
func (w *evictionWatch) check(st memory.Stats, now time.Time) (string, bool) {
	n := st.Evictions - w.warned
	if n <= 0 || !w.at.IsZero() && now.Sub(w.at) < evictionWarnEvery {
		return "", false
	}
	since := "since start"
	if !w.at.IsZero() {
		since = fmt.Sprintf("in the last %v", now.Sub(w.at).Round(time.Second))
	}
	w.warned, w.at = st.Evictions, now
	return fmt.Sprintf("%s: the memory store evicted %s %s, their limits' windows not over, to stay under its cap of %s: "+
		"each restarts with a fresh budget, so its limits admit more than configured (over-admission); "+
		"raise the cap with memory://?max_keys=N (0 for none), or use a shared store (redis://, memcached://) (docs/SERVER.md)",
		w.store, count(int(n), "live key"), since, count(int(st.MaxKeys), "key")), true
}

// watchEvictions reads stats every evictionPoll until ctx is done, and
// passes each WARN that w decides to warn.
func watchEvictions(ctx context.Context, stats func() memory.Stats, w *evictionWatch, warn func(string)) {
	t := time.NewTicker(evictionPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			if msg, ok := w.check(stats(), now); ok {
				warn(msg)
			}
		}
	}
}
