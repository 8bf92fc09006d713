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

// As store/lease does, a refusal the instance remembers refuses locally
// only requests that cost as much as the refused one or more: a smaller
// one still asks the store, which may have room for it. Limit 4 per fixed
// 1 s window, leases of 4: the request of 3 at 0.2 s is refused (1 unit
// left, given back), and the request of 1 at 0.3 s takes that unit. The
// remembered refusal refused it too, without asking.
func TestLeaseRefusalCachedForItsCostOnly(t *testing.T) {
	log := filepath.Join(t.TempDir(), "costs.log")
	if err := os.WriteFile(log, []byte("0.1 a 3\n0.2 a 3\n0.3 a 1\n0.4 a 3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sc := &Scenario{
		Duration: sec(3), Limit: 4, Period: sec(1),
		Traffic:    []Source{{Kind: SourceReplay, File: log}},
		Contenders: []Contender{{Strategy: StrategyLease, Algorithm: "fixed_window", Instances: 1, LeaseSize: 4, LeaseTTL: sec(10)}},
	}
	m := run(t, sc).Contenders[0].Metrics
	// Store calls: a lease at 0.1 s; at 0.2 s a give-back and a refused
	// lease; at 0.3 s a lease of the unit left; 0.4 s is refused locally.
	if m.Admitted != 2 || m.AdmittedUnits != 4 || m.StoreCalls != 4 {
		t.Errorf("admitted %d requests, %d units, %d store calls; want 2 requests (0.1 s and 0.3 s), 4 units, 4 store calls", m.Admitted, m.AdmittedUnits, m.StoreCalls)
	}
}
