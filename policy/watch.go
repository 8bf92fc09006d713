package policy

import (
	"context"
	"crypto/sha256"
	"errors"
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

// fingerprintPath hashes the content of every file Load would read at path,
// with their names, so that any edit, added or removed file, or symlink swap
// (a Kubernetes ConfigMap update) changes it.
func fingerprintPath(path string) [32]byte {
	srcs, probs := readSources(path)
	h := sha256.New()
	for _, p := range probs {
		h.Write([]byte(p.String()))
		h.Write([]byte{0})
	}
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
// invalid one. The content at the time of the call is the baseline: fn is
// called for changes only. Polling content, rather than file events, also
// sees edits through symlink swaps and network file systems, at the cost of
// reading the files once per interval. Watch returns ctx's error when ctx is
// done.
//
// A directory that loses every configuration file after holding some is
// not passed on as a configuration without domains: a directory emptied on
// the way to new files (rm, then cp) would lift every limit for a moment.
// fn gets Problems saying so instead, so the rules in force stay; a file
// added back loads as usual. (A directory empty from the start loads as a
// configuration without domains, as envoyproxy/ratelimit does.)
func Watch(ctx context.Context, path string, interval time.Duration, fn func(*Config, error)) error {
	if fn == nil {
		return errors.New("policy: Watch: nil callback")
	}
	if interval <= 0 {
		interval = DefaultWatchInterval
	}
	last := fingerprintPath(path)
	srcs, _ := readSources(path)
	hadFiles := len(srcs) > 0
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		sum := fingerprintPath(path)
		if sum == last {
			continue
		}
		last = sum
		cfg, err := Load(path)
		if err == nil && cfg.noFiles && hadFiles {
			fn(nil, Problems{{File: path, Message: "the directory holds no *.yaml or *.yml file any more: " +
				"the rules in force stay (a reload never lifts every limit at once; restart to run without rules)"}})
			continue
		}
		if err == nil {
			hadFiles = !cfg.noFiles
		}
		fn(cfg, err)
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
