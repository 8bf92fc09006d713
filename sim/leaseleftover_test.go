package sim

import (
	"os"
	"path/filepath"
	"testing"
)

// As store/lease does, an instance gives the units left of its lease back
// before it takes a new one, instead of keeping them beside it: units
// charged at different times cannot be given back as one. Limit 4 per
// fixed 1 s window, leases of 4, one instance: the lease taken at 0.9 s
// for a request of 3 leaves 1; the request of 3 at 1.1 s gives it back
// and takes a new lease of 4, leaving 1, too few for the request of 2 at
// 1.2 s, which the store, holding 3 of window 1's 4, refuses. Kept beside
// the new lease, the unit of window 0 made 2 and admitted it: 5 units
// from window 1's lease where store/lease admits 3.
func TestLeaseGivesLeftoverBackBeforeANewLease(t *testing.T) {
	log := filepath.Join(t.TempDir(), "costs.log")
	if err := os.WriteFile(log, []byte("0.9 a 3\n1.1 a 3\n1.2 a 2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sc := &Scenario{
		Duration: sec(3), Limit: 4, Period: sec(1),
		Traffic:    []Source{{Kind: SourceReplay, File: log}},
		Contenders: []Contender{{Strategy: StrategyLease, Algorithm: "fixed_window", Instances: 1, LeaseSize: 4, LeaseTTL: sec(10)}},
	}
	m := run(t, sc).Contenders[0].Metrics
	// Store calls: a lease at 0.9 s; at 1.1 s a give-back and a lease;
	// at 1.2 s a give-back and a refused lease.
	if m.Admitted != 2 || m.AdmittedUnits != 6 || m.StoreCalls != 5 {
		t.Errorf("admitted %d requests, %d units, %d store calls; want 2 requests (0.9 s and 1.1 s), 6 units, 5 store calls", m.Admitted, m.AdmittedUnits, m.StoreCalls)
	}
}
