package policy

import (
	"strings"
	"testing"
)

// TestAdaptiveFloorWarning: an adaptive rule whose floor admits fewer
// than min_samples requests per interval loads with a warning at its
// adaptive block, saying what to change; one whose floor admits enough
// loads without it.
func TestAdaptiveFloorWarning(t *testing.T) {
	const body = "held there, no interval has samples enough to be judged alone, so its factor rises only once samples carried over from several intervals reach min_samples, " +
		"and not while intervals come without samples (which drop those carried): the rule can stay cut; "
	const head = "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      name: r\n"
	for _, c := range []struct {
		name, rule string
		want       string // "" for no warning
	}{
		{"5/s min 0.1", "      unit: second\n      requests_per_unit: 5\n      adaptive: {min: 0.1, error_ratio: 0.1}\n",
			"adaptive: cut to its floor (min 0.1), this rule admits 1 per 1s, 1 per interval of 1s, fewer than min_samples 10: " + body +
				"raise interval to at least 10s or lower min_samples to at most 1"},
		{"50/s min 0.1", "      unit: second\n      requests_per_unit: 50\n      adaptive: {min: 0.1, error_ratio: 0.1}\n",
			"adaptive: cut to its floor (min 0.1), this rule admits 5 per 1s, 5 per interval of 1s, fewer than min_samples 10: " + body +
				"raise min to at least 0.2, raise interval to at least 2s or lower min_samples to at most 5"},
		{"60/min min 0.1, interval 2s", "      unit: minute\n      requests_per_unit: 60\n      adaptive: {min: 0.1, error_ratio: 0.1, interval: 2s, min_samples: 1}\n",
			"adaptive: cut to its floor (min 0.1), this rule admits 6 per 1m, 0.2 per interval of 2s, fewer than min_samples 1: " + body +
				"raise min to at least 0.5 or raise interval to at least 10s"},
		{"100/s min 0.1", "      unit: second\n      requests_per_unit: 100\n      adaptive: {min: 0.1, error_ratio: 0.1}\n", ""},
		{"5/s min 0.1 interval 10s", "      unit: second\n      requests_per_unit: 5\n      adaptive: {min: 0.1, error_ratio: 0.1, interval: 10s}\n", ""},
		{"5/s min 0.1 min_samples 1", "      unit: second\n      requests_per_unit: 5\n      adaptive: {min: 0.1, error_ratio: 0.1, min_samples: 1}\n", ""},
	} {
		cfg, err := Parse("a.yaml", []byte(head+c.rule))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		var got []Problem
		for _, w := range cfg.Warnings() {
			if strings.HasPrefix(w.Message, "adaptive: cut to its floor") {
				got = append(got, w)
			}
		}
		switch {
		case c.want == "" && len(got) != 0:
			t.Errorf("%s: warnings %v, want none", c.name, got)
		case c.want != "" && (len(got) != 1 || got[0].File != "a.yaml" || got[0].Line != 8 || got[0].Message != c.want):
			t.Errorf("%s: warnings %v, want one at line 8:\n%s", c.name, got, c.want)
		}
	}
}
