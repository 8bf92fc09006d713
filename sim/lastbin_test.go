package sim

import "testing"

// The rate series at the end of a last bin cut short by the run's end
// (2.5 s in bins of 1 s) holds the units of the whole trailing Period,
// (1.5 s, 2.5 s]: 9 of a steady 10 a second (1.6 s to 2.4 s), as the one
// key's window says. The bins' sum covered only the half bin [2 s, 2.5 s)
// and said 5, so the rate chart's last point fell to half.
func TestAllWindowOfAShortLastBin(t *testing.T) {
	sc := &Scenario{
		Duration: sec(2.5), Limit: 100, Period: sec(1),
		Traffic:    []Source{{Kind: SourceSteady, Rate: 10}},
		Contenders: []Contender{{Algorithm: "fixed_window"}, {Strategy: StrategyCentral, RTT: sec(0.2)}},
	}
	res := run(t, sc)
	// The central store's requests proceed a round trip after they
	// arrive: those of 1.4 s to 2.3 s in (1.5 s, 2.5 s].
	for _, c := range []struct {
		name string
		s    Series
		want int64
	}{{"offered", res.Offered.Series, 9}, {"ideal", res.Ideal.Series, 9}, {"fixed_window", res.Contenders[0].Series, 9}, {"central", res.Contenders[1].Series, 10}} {
		if n := len(c.s.AllWindow); n != 3 || c.s.AllWindow[2] != c.want || c.s.Window[2] != c.want {
			t.Errorf("%s: all keys' window at 2.5 s %v, the key's %v; want %d of %d bins", c.name, c.s.AllWindow[n-1], c.s.Window[n-1], c.want, 3)
		}
	}
}
