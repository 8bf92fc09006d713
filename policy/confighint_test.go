package policy

import (
	"strings"
	"testing"
)

// The configuration problems a new user meets each say what to write
// instead, at the file:line of the value: a unit that is a near miss or an
// abbreviation of a known one, a duration written as a unit, another
// length; a file with no document in it; a field written under another
// common name; a missing domain or key; descriptors or a rate_limit of the
// wrong shape.
func TestConfigProblemsSayWhatToWrite(t *testing.T) {
	rule := func(unit string) string {
		return "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: " + unit + "\n      requests_per_unit: 5\n"
	}
	for _, tc := range []struct{ name, data, want string }{
		{"a plural", rule("minutes"), `c.yaml:5: invalid rate limit unit "minutes" (want second, minute, hour, day, week, month or year): did you mean "minute"?`},
		{"a capital plural", rule("Seconds"), `c.yaml:5: invalid rate limit unit "Seconds" (want second, minute, hour, day, week, month or year): did you mean "second"?`},
		{"an adverb", rule("hourly"), `c.yaml:5: invalid rate limit unit "hourly" (want second, minute, hour, day, week, month or year): did you mean "hour"?`},
		{"an abbreviation", rule("min"), `c.yaml:5: invalid rate limit unit "min" (want second, minute, hour, day, week, month or year): did you mean "minute"?`},
		{"a one-letter unit", rule("h"), `c.yaml:5: invalid rate limit unit "h" (want second, minute, hour, day, week, month or year): did you mean "hour"?`},
		{"an algorithm without its underscore", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {algorithm: tokenbucket, unit: second, requests_per_unit: 5}\n",
			`c.yaml:4: unknown algorithm "tokenbucket": did you mean "token_bucket"? (want one of fixed_window, sliding_log, sliding_window, token_bucket, gcra, shaper, smooth_bursty, smooth_warmup, concurrency)`},
		{"a duration", rule("1m"), `c.yaml:5: invalid rate limit unit "1m" (want second, minute, hour, day, week, month or year): for a period of 1m, write period: 1m in place of unit`},
		{"a duration in days", rule("90d"), `c.yaml:5: invalid rate limit unit "90d" (want second, minute, hour, day, week, month or year): for a period of 90d, write period: 90d in place of unit`},
		// A period must be at least 1µs and below 2^53µs: a unit of 1ns
		// or 105000d is not told to become a period that is refused.
		{"a duration too short for a period", rule("1ns"), `c.yaml:5: invalid rate limit unit "1ns" (want second, minute, hour, day, week, month or year); ` +
			"for another length, write period: in place of unit (such as period: 14d or period: 90s)"},
		{"a duration too long for a period", rule("105000d"), `c.yaml:5: invalid rate limit unit "105000d" (want second, minute, hour, day, week, month or year); ` +
			"for another length, write period: in place of unit (such as period: 14d or period: 90s)"},
		{"another length", rule("fortnight"), `c.yaml:5: invalid rate limit unit "fortnight" (want second, minute, hour, day, week, month or year); ` +
			"for another length, write period: in place of unit (such as period: 14d or period: 90s)"},
		{"an empty file", "", "c.yaml:1: config file cannot have empty domain: the file holds no YAML document (it is empty or only comments): " +
			"write domain: <name> and its descriptors in it, or remove it"},
		{"only comments", "# limits to come\n\n# more\n", "c.yaml:1: config file cannot have empty domain: the file holds no YAML document (it is empty or only comments): " +
			"write domain: <name> and its descriptors in it, or remove it"},
		{"limit for requests_per_unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      limit: 5\n",
			`c.yaml:6: unknown field "limit" in rate_limit (did you mean "requests_per_unit"?)`},
		{"rps for requests_per_unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      rps: 5\n",
			`c.yaml:6: unknown field "rps" in rate_limit (did you mean "requests_per_unit"?)`},
		{"window for period", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      window: 10s\n      requests_per_unit: 5\n",
			`c.yaml:5: unknown field "window" in rate_limit (did you mean "period"?)`},
		{"limit for rate_limit", "domain: d\ndescriptors:\n  - key: k\n    limit: {unit: second, requests_per_unit: 5}\n",
			`c.yaml:4: unknown field "limit" in descriptor (did you mean "rate_limit"?)`},
		{"rules for descriptors", "domain: d\nrules:\n  - key: k\n",
			`c.yaml:2: unknown field "rules" in the domain (did you mean "descriptors"?)`},
		{"no domain", "descriptors:\n  - key: k\n",
			"c.yaml:1: config file cannot have empty domain: the domain field is missing; write domain: <name> at the top of the file"},
		{"no key", "domain: d\ndescriptors:\n  - value: v\n    rate_limit: {unit: second, requests_per_unit: 5}\n",
			"c.yaml:3: descriptor has empty key: every descriptor needs key: <name>, the entry key of the requests it matches"},
		{"descriptors without dashes", "domain: d\ndescriptors:\n  key: k\n  rate_limit: {unit: second, requests_per_unit: 5}\n",
			`c.yaml:3: descriptors must be a list, got a mapping: start each descriptor with "- ", as in "- key: user"`},
		{"rate_limit as a string", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: 5/second\n",
			`c.yaml:4: rate_limit must be a mapping, got "5/second" (write it as rate_limit: {unit: second, requests_per_unit: 5}, ` +
				"or its fields indented on the lines below it)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("c.yaml", []byte(tc.data))
			if err == nil || err.Error() != tc.want {
				t.Errorf("Parse: %v\nwant %s", err, tc.want)
			}
		})
	}
}

// Descriptors indented under a rate_limit (as under an unlimited: true
// that reads like a section) are ignored, as envoyproxy/ratelimit ignores
// them; the warning says that they limit nothing and how to nest them.
func TestDescriptorsInsideRateLimitWarning(t *testing.T) {
	cfg, err := Parse("c.yaml", []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unlimited: true\n      descriptors:\n"+
		"        - key: j\n          rate_limit: {unit: second, requests_per_unit: 5}\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := `c.yaml:6: field "descriptors" is ignored in rate_limit, as envoyproxy/ratelimit ignores it there: ` +
		"the descriptors under it are not loaded and limit nothing; to nest them in this descriptor, indent descriptors: as far as rate_limit:, not under it"
	if got := strings.Join(problemLines(cfg.Warnings()), "\n"); got != want {
		t.Errorf("warnings\n%s\nwant\n%s", got, want)
	}
	if len(cfg.rules) != 1 {
		t.Errorf("%d rules, want 1 (k alone): %s", len(cfg.rules), cfg.Dump())
	}
}
