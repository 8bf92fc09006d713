package middleware_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/floodgate/floodgate/middleware"
	"github.com/floodgate/floodgate/policy"
)

// A middleware's CheckConfig registered with the Engine turns a reload
// that would lift its limits silently — its domain gone, its key renamed
// in the rules, a degrade rule without its fallback — into a refused
// reload: SetConfig returns the middleware's error and the configuration
// in force keeps limiting. After remove, the same configuration installs.
func TestCheckConfigRefusesReload(t *testing.T) {
	e := engine(t, perIPConfig, nil)
	mw, err := middleware.New(e, "web", extractor(t, perIP))
	if err != nil {
		t.Fatal(err)
	}
	remove := e.AddConfigCheck(mw.CheckConfig)
	h := mw.Handler(http.HandlerFunc(ok))
	get := func() int {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("GET", "/", nil)
		req.RemoteAddr = "192.0.2.1:1234"
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	parse := func(y string) *policy.Config {
		t.Helper()
		cfg, err := policy.Parse("reload.yaml", []byte(y))
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	before := e.Config()

	for _, tc := range []struct{ name, yaml, want string }{
		{"domain gone", "domain: other\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: minute, requests_per_unit: 2}\n",
			`middleware: domain "web" is not in the configuration (it has "other")`},
		{"key renamed", "domain: web\ndescriptors:\n  - key: remote_adress\n    rate_limit: {unit: minute, requests_per_unit: 2}\n",
			`middleware: extractor descriptors[0] [remote_address]: no rule of domain "web"`},
		{"fallback missing", "domain: web\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: minute, requests_per_unit: 2, strategy: degrade, fallback: cached}\n",
			`"cached"`},
	} {
		err := e.SetConfig(parse(tc.yaml))
		if err == nil || !strings.HasPrefix(err.Error(), "policy: configuration not installed, the one in force stays: ") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: SetConfig = %v\nwant the refusal, containing %s", tc.name, err, tc.want)
		}
		if e.Config() != before {
			t.Fatalf("%s: the configuration in force changed", tc.name)
		}
	}
	// perIPConfig's limit still applies.
	codes := []int{get(), get(), get(), get()}
	if codes[0] != 200 || codes[2] != 200 || codes[3] != 429 {
		t.Fatalf("after refused reloads, codes = %v, want the configured limit of 3 still enforced", codes)
	}

	remove()
	remove() // a second call does nothing
	if err := e.SetConfig(parse("domain: other\n")); err != nil {
		t.Fatalf("after remove, SetConfig = %v, want it installed", err)
	}
	if e.Config() == before {
		t.Fatal("after remove, the configuration in force did not change")
	}
}
