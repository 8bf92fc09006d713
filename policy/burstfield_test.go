package policy

import "testing"

// A bucket's burst written as 0 is an error at its line: algo reads a
// Burst of 0 as unset, so it used to load as a capacity of
// requests_per_unit without a word. A shaper's queue written queue_size
// is named queue_size in its errors, not burst, a field the file does
// not have.
func TestBurstFieldErrors(t *testing.T) {
	for _, c := range []struct{ name, rule, want string }{
		{"token bucket burst 0", "{algorithm: token_bucket, unit: second, requests_per_unit: 5, burst: 0}",
			"b.yaml:4: burst must be >= 1 for token_bucket, got 0 (a bucket of capacity 0 admits nothing); leave burst out for a capacity of requests_per_unit"},
		{"gcra burst 0", "{algorithm: gcra, unit: second, requests_per_unit: 5, burst: 0}",
			"b.yaml:4: burst must be >= 1 for gcra, got 0 (a bucket of capacity 0 admits nothing); leave burst out for a capacity of requests_per_unit"},
		{"shaper queue_size below delay", "{algorithm: shaper, unit: second, requests_per_unit: 5, queue_size: 3, delay: 4}",
			"b.yaml:4: delay: must be <= queue_size (3), got 4"},
		{"shaper burst below delay", "{algorithm: shaper, unit: second, requests_per_unit: 5, burst: 3, delay: 4}",
			"b.yaml:4: delay: must be <= burst (3), got 4"},
	} {
		t.Run(c.name, func(t *testing.T) {
			yaml := "domain: d\ndescriptors:\n  - key: k\n    rate_limit: " + c.rule + "\n"
			_, err := Parse("b.yaml", []byte(yaml))
			if err == nil || err.Error() != c.want {
				t.Errorf("Parse: %v\nwant: %s", err, c.want)
			}
		})
	}
	// What stays valid: a shaper without a queue, a bucket's burst of 1.
	for _, rule := range []string{
		"{algorithm: shaper, unit: second, requests_per_unit: 5, burst: 0}",
		"{algorithm: shaper, unit: second, requests_per_unit: 5, queue_size: 0}",
		"{algorithm: token_bucket, unit: second, requests_per_unit: 5, burst: 1}",
	} {
		if _, err := Parse("b.yaml", []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: "+rule+"\n")); err != nil {
			t.Errorf("%s: %v", rule, err)
		}
	}
}
