package headers_test

import (
	"slices"
	"testing"

	"github.com/floodgate/floodgate/headers"
)

// FieldNames lists the fields an Options writes, under its names: the
// default set, a set of its own, and renamed fields.
func TestFieldNames(t *testing.T) {
	for _, c := range []struct {
		o    headers.Options
		want []string
	}{
		{headers.Options{}, headers.Options{Set: headers.Default}.FieldNames()},
		{headers.Options{Set: headers.IETF | headers.XRateLimit | headers.RetryAfter},
			[]string{"RateLimit", "RateLimit-Policy", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "Retry-After"}},
		{headers.Options{Set: headers.XRateLimit, Names: headers.Names{Limit: "X-Quota", Remaining: "X-Left"}},
			[]string{"X-Quota", "X-Left", "X-RateLimit-Reset"}},
		{headers.Options{Set: headers.RetryAfter}, []string{"Retry-After"}},
	} {
		if got := c.o.FieldNames(); !slices.Equal(got, c.want) || len(got) == 0 {
			t.Errorf("%+v: %q, want %q", c.o, got, c.want)
		}
	}
}
