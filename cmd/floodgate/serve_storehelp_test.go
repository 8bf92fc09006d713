package main

import (
	"flag"
	"fmt"
	"strings"
	"testing"

	"github.com/floodgate/floodgate/store/memory"
)

// TestServeStoreHelpEviction: serve -h describes the memory store's key
// cap as package memory applies it. It said "evicting the oldest", while a
// full shard evicts an expired key or the one whose state expires soonest
// (memory.WithMaxKeys), which is what an operator sizing the cap needs to
// know: an old, long-lived key is kept.
func TestServeStoreHelpEviction(t *testing.T) {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	var f serveFlags
	f.register(fs)
	usage := fs.Lookup("store").Usage
	for _, want := range []string{fmt.Sprintf("at most %d keys", memory.DefaultMaxKeys), "evicts the key whose state expires soonest"} {
		if !strings.Contains(usage, want) {
			t.Errorf("--store usage %q does not say %q", usage, want)
		}
	}
	if strings.Contains(usage, "oldest") {
		t.Errorf("--store usage %q says the oldest key is evicted; the memory store evicts the one closest to expiry", usage)
	}
}
