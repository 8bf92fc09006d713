package server_test

import (
	"testing"

	"github.com/floodgate/floodgate/server"
)

// TestOverridePutSaysWhatToWrite: an override PUT with the configuration's
// names for a rate limit's fields (unit, unit_multiplier, a rate_limit
// object), a usual synonym, or a period without its unit is refused with
// what to write instead. "unit" used to be answered `json: unknown field
// "unit"` alone, "30" `want second, minute, hour, day, week or a duration
// like 30s`, and 30 `field "period": want a string, got number`.
func TestOverridePutSaysWhatToWrite(t *testing.T) {
	e := newEnv(t, server.WithAdminToken("tok"))
	for _, c := range []struct{ body, want string }{
		{`{"requests_per_unit":5,"unit":"minute"}`,
			`bad request: unknown field "unit": an override gives its period as "period", a unit (second, minute, hour, day, week) or a duration, with unit_multiplier folded in: "period": "minute"`},
		{`{"requests_per_unit":5,"unit":"minute","unit_multiplier":5}`,
			`bad request: unknown field "unit": an override gives its period as "period", a unit (second, minute, hour, day, week) or a duration, with unit_multiplier folded in: "period": "5m0s" (5 minutes)`},
		{`{"requests_per_unit":5,"unit_multiplier":2}`,
			`bad request: unknown field "unit_multiplier": an override gives its period as "period", a unit (second, minute, hour, day, week) or a duration, with unit_multiplier folded in: "period": "minute" or "period": "30s"`},
		{`{"requests_per_unit":5,"window":"1m"}`,
			`bad request: unknown field "window": an override's period is "period", a unit (second, minute, hour, day, week) or a duration: "period": "minute" or "period": "30s"`},
		{`{"limit":5}`,
			`bad request: unknown field "limit": an override's number of requests per period is "requests_per_unit", e.g. "requests_per_unit": 100`},
		{`{"rate_limit":{"unit":"minute","requests_per_unit":5}}`,
			`bad request: unknown field "rate_limit": an override's fields go at the top level, not in a rate_limit object: {"requests_per_unit": 100, "period": "minute", "burst": 20} (period and burst optional)`},
		{`{"requests_per_unit":5,"period":"30"}`,
			`period "30": a duration needs a unit, e.g. "period": "30s" for seconds; or second, minute, hour, day, week`},
		{`{"requests_per_unit":5,"period":30}`,
			`bad request: field "period": want a string, a unit or a duration with its unit: "period": "30s" for 30 seconds, or "period": "minute"`},
		// Other errors are as before.
		{`{"requests_per_unit":5,"colour":1}`, `bad request: json: unknown field "colour"`},
		{`{"requests_per_unit":5,"period":"soon"}`, `period "soon": want second, minute, hour, day, week or a duration like 30s`},
	} {
		code, body, _ := do(t, "PUT", e.admin.URL+"/admin/api/overrides/quota/hourly", "application/json", []byte(c.body), "Authorization", "Bearer tok")
		if got := errMsg(body); code != 400 || got != c.want {
			t.Errorf("PUT %s:\n got %d %s\nwant 400 %s", c.body, code, got, c.want)
		}
	}
	// What the messages say to write is taken.
	for _, good := range []string{`{"requests_per_unit":5,"period":"5m0s"}`, `{"requests_per_unit":5,"period":"30s"}`, `{"requests_per_unit":5,"period":"minute"}`} {
		if code, body, _ := do(t, "PUT", e.admin.URL+"/admin/api/overrides/quota/hourly", "application/json", []byte(good), "Authorization", "Bearer tok"); code != 200 {
			t.Errorf("PUT %s: %d %s, want 200", good, code, body)
		}
	}
}
