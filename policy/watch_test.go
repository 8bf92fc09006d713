package policy

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// watchLimit is a configuration whose one rule allows n a minute.
func watchLimit(n string) string {
	return "domain: live\ndescriptors:\n  - key: k\n    rate_limit: {name: r, unit: minute, requests_per_unit: " + n + "}\n"
}

// quotaOf is the requests_per_unit of watchLimit's rule in cfg, or a
// description of what fn got instead.
func quotaOf(cfg *Config, err error) string {
	if err != nil {
		return "error: " + err.Error()
	}
	if d := cfg.Domain("live"); d == nil {
		return "no domain live"
	}
	for _, r := range cfg.Rules() {
		if r.Name == "r" {
			return strconv.FormatInt(r.Params.Limit, 10)
		}
	}
	return "no rule r"
}

// calls records what fn got, for the test goroutine to read.
type calls struct {
	mu  sync.Mutex
	got []string
}

func (c *calls) add(s string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.got = append(c.got, s)
	return len(c.got)
}

func (c *calls) list() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.got)
}

// TestWatcherReloadSeesWriteDuringInstall: a write that lands after a
// Reload loaded the files — here while fn installs what it loaded — is
// loaded at the next poll. (serve used to stop the watcher for SIGHUP,
// load, install, and restart it: the restarted watcher took that write as
// its baseline and never loaded it, until the next change.)
func TestWatcherReloadSeesWriteDuringInstall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "rules.yaml")
		write := func(s string) {
			if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		write(watchLimit("5"))
		var c calls
		w, err := NewWatcher(path, time.Second, func(cfg *Config, err error) {
			if c.add(quotaOf(cfg, err)) == 1 {
				write(watchLimit("9")) // lands between the load and any later look
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go w.Run(ctx)
		synctest.Wait() // the baseline is read
		write(watchLimit("7"))
		w.Reload()
		synctest.Wait()
		if got := c.list(); len(got) != 1 || got[0] != "7" {
			t.Fatalf("after Reload: fn got %q, want [7] at once (no poll yet)", got)
		}
		time.Sleep(5 * time.Second) // five polls of fake time
		synctest.Wait()
		if got := c.list(); len(got) != 2 || got[1] != "9" {
			t.Fatalf("fn got %q, want [7 9]: the write made while 7 was installed was never loaded", got)
		}
	})
}

// TestWatcherReload: Reload loads at once whether or not the files
// changed, and the next polls do not load the same content again; with
// interval 0 only Reload loads; a directory emptied of its files is refused
// on Reload as on a poll, and its rules stay.
func TestWatcherReload(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		path := filepath.Join(dir, "rules.yaml")
		write := func(s string) {
			if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		write(watchLimit("5"))
		for _, interval := range []time.Duration{time.Second, 0} {
			var c calls
			w, err := NewWatcher(dir, interval, func(cfg *Config, err error) { c.add(quotaOf(cfg, err)) })
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- w.Run(ctx) }()
			synctest.Wait()
			w.Reload()
			synctest.Wait()
			time.Sleep(3 * time.Second)
			synctest.Wait()
			if got := c.list(); len(got) != 1 || got[0] != "5" {
				t.Fatalf("interval %v: Reload of unchanged files then 3 polls: fn got %q, want [5] (once)", interval, got)
			}
			write(watchLimit("6"))
			time.Sleep(3 * time.Second)
			synctest.Wait()
			if got, want := c.list(), map[time.Duration]int{time.Second: 2, 0: 1}[interval]; len(got) != want {
				t.Fatalf("interval %v: a change and 3 s: fn got %q, want %d call(s)", interval, got, want)
			}
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			w.Reload()
			synctest.Wait()
			if got := c.list(); !strings.Contains(got[len(got)-1], "the directory holds no *.yaml or *.yml file any more") {
				t.Fatalf("interval %v: Reload of an emptied directory: fn got %q, want it refused", interval, got[len(got)-1])
			}
			if err := w.Run(ctx); err == nil || !strings.Contains(err.Error(), "runs already") {
				t.Errorf("a second Run: %v, want an error", err)
			}
			cancel()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Errorf("Run after cancel: %v", err)
			}
			write(watchLimit("5"))
		}
	})
	if _, err := NewWatcher("x", -time.Second, func(*Config, error) {}); err == nil {
		t.Error("NewWatcher with a negative interval: no error")
	}
	if _, err := NewWatcher("x", time.Second, nil); err == nil {
		t.Error("NewWatcher with a nil fn: no error")
	}
}

// TestWatcherBaselineAtNew: the baseline is the content when NewWatcher
// returns, so a write made before Run starts is loaded at its first poll
// (a caller that loaded the configuration, built a watcher and started it
// later does not lose it).
func TestWatcherBaselineAtNew(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "rules.yaml")
		if err := os.WriteFile(path, []byte(watchLimit("5")), 0o644); err != nil {
			t.Fatal(err)
		}
		var c calls
		w, err := NewWatcher(path, time.Second, func(cfg *Config, err error) { c.add(quotaOf(cfg, err)) })
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(watchLimit("8")), 0o644); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go w.Run(ctx)
		time.Sleep(2500 * time.Millisecond) // two polls: the change, then the same again
		synctest.Wait()
		if got := c.list(); len(got) != 1 || got[0] != "8" {
			t.Fatalf("fn got %q, want [8]: the write before Run", got)
		}
	})
}

// TestWatcherLoadIsTheBaseline: Watcher.Load loads the files and takes the
// very bytes it loaded as the baseline, whatever changed since NewWatcher:
// a write landing after the load is loaded at the next poll, and the
// content loaded is not loaded again. (serve loaded the configuration and
// then built the watcher, whose baseline was read afterwards: a write
// between the two became the baseline and was never loaded.)
func TestWatcherLoadIsTheBaseline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "rules.yaml")
		write := func(n string) {
			t.Helper()
			if err := os.WriteFile(path, []byte(watchLimit(n)), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		write("5")
		var c calls
		w, err := NewWatcher(path, time.Second, func(cfg *Config, err error) { c.add(quotaOf(cfg, err)) })
		if err != nil {
			t.Fatal(err)
		}
		write("6") // after NewWatcher, before the first load
		cfg, err := w.Load()
		if got := quotaOf(cfg, err); got != "6" {
			t.Fatalf("Load = %s, want 6", got)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go w.Run(ctx)
		time.Sleep(1500 * time.Millisecond)
		synctest.Wait()
		if got := c.list(); len(got) != 0 {
			t.Fatalf("fn got %q before any change, want nothing: the loaded content is the baseline", got)
		}
		write("7") // after the load
		// Two polls: the change, then the same again.
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if got := c.list(); len(got) != 1 || got[0] != "7" {
			t.Fatalf("fn got %q, want [7]: the write after the load", got)
		}
	})
}

// TestWatcherWaitsForTheWriteToSettle: a change is loaded once two polls
// in a row find the same content. A file rewritten between every two
// polls, as a slow writer or one caught half-way would leave it, is not
// loaded; once it stays, it is loaded at the second poll that finds it,
// once. Before, each poll loaded what it found: a valid half of a file
// lifted the limits of the rules still to be written until the next poll.
func TestWatcherWaitsForTheWriteToSettle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "rules.yaml")
		write := func(text string) {
			t.Helper()
			if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		write(watchLimit("5"))
		var c calls
		w, err := NewWatcher(path, time.Second, func(cfg *Config, err error) { c.add(quotaOf(cfg, err)) })
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go w.Run(ctx)
		time.Sleep(500 * time.Millisecond) // between polls
		// Half of the next file, a valid configuration without the rule,
		// then a different half at each poll.
		for i := range 3 {
			write("domain: live\n" + strings.Repeat("#\n", i))
			time.Sleep(time.Second)
			synctest.Wait()
		}
		if got := c.list(); len(got) != 0 {
			t.Fatalf("fn got %q while the file changed at every poll, want nothing", got)
		}
		write(watchLimit("9"))
		time.Sleep(time.Second) // one poll finds it
		synctest.Wait()
		if got := c.list(); len(got) != 0 {
			t.Fatalf("fn got %q at the first poll that found the file whole, want nothing yet", got)
		}
		time.Sleep(3 * time.Second)
		synctest.Wait()
		if got := c.list(); len(got) != 1 || got[0] != "9" {
			t.Fatalf("fn got %q, want [9]: loaded once, at the second poll", got)
		}
	})
}
