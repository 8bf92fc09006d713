package policy

import (
	"errors"
	"fmt"
	"testing"
)

// A period too long for a limit says so at its line, whether or not
// time.Duration can hold it: 106751d and 2562048h were "period must be a
// duration such as ...", as if misspelled, and 100001d (274 years, a
// period algo.Compile takes) was refused the same way.
func TestPeriodTooLong(t *testing.T) {
	const tooLong = "period %s is too long: a limit's period must be below 2^53µs (about 285 years, 104249 days); shorten it"
	for _, v := range []string{"106751d", "2562048h", "104250d", "15000w", "99999999999999999999d", "1d2562047h"} {
		yaml := "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      requests_per_unit: 1\n      period: " + v + "\n"
		want := "p.yaml:6: " + fmt.Sprintf(tooLong, v)
		if _, err := Parse("p.yaml", []byte(yaml)); err == nil || err.Error() != want {
			t.Errorf("period %s:\ngot  %v\nwant %s", v, err, want)
		}
	}
	for _, v := range []string{"100001d", "104249d", "2500000h"} {
		mustParse(t, "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {requests_per_unit: 1, period: "+v+"}\n")
	}
	// Other durations: the range of time.Duration, not a bad spelling.
	_, err := Parse("p.yaml", []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, strategy: wait, max_wait: 106752d}\n"))
	if want := "p.yaml:4: max_wait must be below 2^63ns (about 292 years), got 106752d"; err == nil || err.Error() != want {
		t.Errorf("max_wait 106752d:\ngot  %v\nwant %s", err, want)
	}
	if _, err := parseDuration("2562048h"); !errors.Is(err, errDurationRange) {
		t.Errorf("parseDuration(2562048h) = %v, want errDurationRange", err)
	}
	if _, err := parseDuration("10 hours"); err == nil || errors.Is(err, errDurationRange) {
		t.Errorf("parseDuration(10 hours) = %v, want a syntax error", err)
	}
}
