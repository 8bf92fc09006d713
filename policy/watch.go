package policy

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"sync/atomic"
	"time"
)

// DefaultWatchInterval is how often Watch looks at the configuration when
// given no interval.
const DefaultWatchInterval = time.Second

// Reload loads the configuration at path and installs it. When the file is
// invalid the configuration in force stays, and the error (Problems) says
// why.
func (e *Engine) Reload(path string) error {
	cfg, err := Load(path)
	if err != nil {
		return err
	}
	return e.SetConfig(cfg)
}

// sourcesSum hashes what readSources returned — every file Load would
// read, with its name, the names of the files it skips (each a warning),
// and the problems reading them — so that any edit, added or removed file,
// or symlink swap (a Kubernetes ConfigMap update) changes it.
func sourcesSum(srcs []source, skipped []string, probs Problems) [32]byte {
	h := sha256.New()
	for _, p := range probs {
		h.Write([]byte(p.String()))
		h.Write([]byte{0})
	}
	h.Write([]byte{1})
	for _, name := range skipped {
		h.Write([]byte(name))
		h.Write([]byte{0})
	}
	h.Write([]byte{1})
	for _, s := range srcs {
		h.Write([]byte(s.name))
		h.Write([]byte{0})
		h.Write(s.data)
		h.Write([]byte{0})
	}
	var sum [32]byte
	h.Sum(sum[:0])
	return sum
}

// Watch polls the configuration at path every interval (DefaultWatchInterval
// when interval <= 0) and, each time its content changes, loads it and calls
// fn with the new Config, or with a nil Config and the Problems of an
// invalid one. A change is loaded once two polls in a row find the same
// content, one or two intervals after it was written: a file caught
// half-written (cp, or an editor saving in place) may be a valid
// configuration that lacks the rules still to come, and would lift their
// limits until the next poll. The content at the time of the call is the baseline: fn is
// called for changes only. Polling content, rather than file events, also
// sees edits through symlink swaps and network file systems, at the cost of
// reading the files once per interval. Watch returns ctx's error when ctx is
// done. It is NewWatcher(path, interval, fn).Run(ctx); a Watcher also takes
// requests to reload at once.
//
// A directory that loses every configuration file after holding some is
// not passed on as a configuration without domains: a directory emptied on
// the way to new files (rm, then cp) would lift every limit for a moment.
// fn gets Problems saying so instead, so the rules in force stay; a file
// added back loads as usual. (A directory empty from the start loads as a
// configuration without domains, as envoyproxy/ratelimit does.)
func Watch(ctx context.Context, path string, interval time.Duration, fn func(*Config, error)) error {
	if interval <= 0 {
		interval = DefaultWatchInterval
	}
	w, err := NewWatcher(path, interval, fn)
	if err != nil {
		return err
	}
	return w.Run(ctx)
}

// Watcher keeps a caller in step with the configuration at path: Run polls
// it and loads each change, and Reload asks Run to load it at once (an
// operator's SIGHUP). Both go through Run's one loop, with one baseline —
// the content last loaded, hashed from the very bytes loaded — and one rule
// for a directory that loses its files (see Watch). So a write that lands
// while a reload is being installed differs from the baseline and is loaded
// at the next look; a watcher stopped for the reload and restarted after
// it would take that write as its baseline and never load it.
type Watcher struct {
	path     string
	interval time.Duration
	fn       func(*Config, error)
	reload   chan struct{} // one pending request; more coalesce into it
	running  atomic.Bool

	// Run's state: the sum of the content last loaded (at first, the
	// baseline) and whether it held files; seen is the sum at the last
	// poll (see Run).
	last, seen [32]byte
	hadFiles   bool
}

// NewWatcher returns a Watcher of the configuration at path that calls fn
// as Watch does: for each change found by polling every interval, and for
// each Reload. An interval of 0 polls never (only Reload loads), unlike
// Watch's; a negative interval or a nil fn is an error. The content at path
// when NewWatcher returns is the baseline: polling calls fn for changes
// from it only, including those made before Run starts. fn is not called
// until Run.
func NewWatcher(path string, interval time.Duration, fn func(*Config, error)) (*Watcher, error) {
	switch {
	case fn == nil:
		return nil, errors.New("policy: Watch: nil callback")
	case interval < 0:
		return nil, fmt.Errorf("policy: Watch: negative interval %v", interval)
	}
	srcs, skipped, probs := readSources(path)
	sum := sourcesSum(srcs, skipped, probs)
	return &Watcher{path: path, interval: interval, fn: fn, reload: make(chan struct{}, 1),
		last: sum, seen: sum, hadFiles: len(srcs) > 0}, nil
}

// Load loads the configuration at path as Load does, from the very bytes
// it then takes as the baseline: call it for the first load, before Run,
// so that a write landing between that load and the baseline is not
// mistaken for the content in force (and never loaded). It must not be
// called while Run runs.
func (w *Watcher) Load() (*Config, error) {
	srcs, skipped, probs := readSources(w.path)
	w.last, w.hadFiles = sourcesSum(srcs, skipped, probs), len(srcs) > 0
	w.seen = w.last
	cfg, _, err := loadSources(w.path, srcs, skipped, probs)
	return cfg, err
}

// Reload asks Run to load the configuration now and call fn with it,
// changed or not, and returns without waiting. Requests made while one is
// pending are answered by one load, which reads the files after all of
// them; a request made before Run starts is answered when it does. It is
// safe to call from any goroutine; one made after Run returned stays
// pending and is answered if Run is started again.
func (w *Watcher) Reload() {
	select {
	case w.reload <- struct{}{}:
	default: // one is pending: it reads the files later than this call
	}
}

// Run watches until ctx is done and returns ctx's error. fn is called from
// Run's goroutine, one call at a time. Run returns an error at once if the
// Watcher runs already; run again after it returned, it goes on from the
// content it last loaded.
func (w *Watcher) Run(ctx context.Context) error {
	if !w.running.CompareAndSwap(false, true) {
		return errors.New("policy: Watcher.Run: the watcher runs already")
	}
	defer w.running.Store(false)
	var tick <-chan time.Time
	if w.interval > 0 {
		t := time.NewTicker(w.interval)
		defer t.Stop()
		tick = t.C
	}
	for {
		forced := false
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick:
		case <-w.reload:
			forced = true
		}
		srcs, skipped, probs := readSources(w.path)
		sum := sourcesSum(srcs, skipped, probs)
		settled := sum == w.seen
		w.seen = sum
		if !forced && (sum == w.last || !settled) {
			// Unchanged, or changed since the last poll: a change is
			// loaded once a poll finds it as the one before did, so that
			// a file caught half-written (a cp or an editor writing in
			// place) is not loaded — it could be a valid configuration
			// that lacks the rules still to be written.
			continue
		}
		w.last = sum
		cfg, _, err := loadSources(w.path, srcs, skipped, probs)
		if err == nil && cfg.noFiles && w.hadFiles {
			w.fn(nil, Problems{{File: w.path, Message: "the directory holds no *.yaml or *.yml file any more: " +
				"the rules in force stay (a reload never lifts every limit at once; restart to run without rules)"}})
			continue
		}
		if err == nil {
			w.hadFiles = !cfg.noFiles
		}
		w.fn(cfg, err)
	}
}

// Watch keeps the Engine's configuration in step with path (see the
// package-level Watch): a valid change is installed atomically, keeping the
// runtime overrides and scales; an invalid one leaves the configuration in
// force untouched. report, when not nil, is called after every change with
// the new Config and nil, or with nil and the error (Problems) that kept
// the old one. It returns ctx's error when ctx is done.
func (e *Engine) Watch(ctx context.Context, path string, interval time.Duration, report func(*Config, error)) error {
	return Watch(ctx, path, interval, func(cfg *Config, err error) {
		if err == nil {
			err = e.SetConfig(cfg)
		}
		if err != nil {
			cfg = nil
		}
		if report != nil {
			report(cfg, err)
		}
	})
}
