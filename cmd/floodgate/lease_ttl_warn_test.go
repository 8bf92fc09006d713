package main

import (
	"strings"
	"testing"
)

// --lease-ttl without --lease-slice sets the length of slices that are
// never taken: serve started without a word, as if leases were on. It is
// a WARN (not an error, as --upstream-timeout without --upstream is): a
// fleet's environment may keep FLOODGATE_LEASE_TTL while an instance turns
// leases off with --lease-slice 0.
func TestServeWarnsLeaseTTLWithoutSlices(t *testing.T) {
	_, errb, stop := startServe(t, "--reload-interval", "0", "--lease-ttl", "5s")
	if code := stop(); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	warns := strings.Join(warnLines(errb.String()), "\n")
	if want := "--lease-ttl 5s does nothing without --lease-slice: leases are off; --lease-slice N (at least 2, remote stores) turns them on"; !strings.Contains(warns, want) {
		t.Errorf("no WARN %q; the WARNs:\n%s", want, warns)
	}
	t.Setenv("FLOODGATE_LEASE_TTL", "2s")
	_, errb, stop = startServe(t, "--reload-interval", "0")
	if code := stop(); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if want := `FLOODGATE_LEASE_TTL="2s" does nothing without --lease-slice`; !strings.Contains(strings.Join(warnLines(errb.String()), "\n"), want) {
		t.Errorf("the WARNs:\n%s\nwant %q", errb.String(), want)
	}
	for _, f := range []serveFlags{
		{leaseSlice: 10, given: map[string]bool{"lease-ttl": true, "lease-slice": true}},
		{leaseSlice: 0, given: map[string]bool{}}, // the default TTL
	} {
		if w := f.leaseWarnings(); len(w) != 0 {
			t.Errorf("leaseWarnings with --lease-slice %d, given %v: %q, want none", f.leaseSlice, f.given, w)
		}
	}
}
