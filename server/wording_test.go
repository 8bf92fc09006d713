package server_test

import (
	"strings"
	"testing"
)

// TestBodyMessagesSpeakJSON: a body that is not a JSON object, or a field
// of the wrong JSON type, is described in JSON terms (no Go type names);
// a single /v1/observe sample is not named as a batch element.
func TestBodyMessagesSpeakJSON(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct {
		path, body, want string
	}{
		{"/v1/decide", `[]`, `the body must be a JSON object, not a JSON array: a request {"domain": …, "descriptors": […]} or a batch {"requests": […]}`},
		{"/v1/peek", `"quota"`, `the body must be a JSON object, not a JSON string: a request`},
		{"/v1/decide", `{"requests":[[]]}`, `field "requests": want an object, got array`},
		{"/v1/decide", `{"domain":"quota","hits":"two","descriptors":[]}`, `field "hits": want an integer, got string`},
		{"/v1/release", `[]`, "the body must be a JSON object, not a JSON array"},
		{"/v1/observe", `[1]`, "the body must be a JSON object, not a JSON array"},
		{"/v1/observe", `{"domain":"quota","rule":"hourly","latency_ms":-1}`, "the sample: want a domain, a rule and 0 <= latency_ms <= 1e9"},
		{"/v1/observe", `{"samples":[{"domain":"quota","rule":"hourly","latency_ms":1},{"domain":"quota","latency_ms":1}]}`, "samples[1]: want a domain"},
	} {
		code, body, _ := do(t, "POST", e.http.URL+tc.path, "application/json", []byte(tc.body))
		msg := errMsg(body)
		if code != 400 || !strings.Contains(msg, tc.want) || strings.Contains(msg, "map[") || strings.Contains(msg, "server.") {
			t.Errorf("%s %s: %d %s, want 400 saying %q", tc.path, tc.body, code, body, tc.want)
		}
	}
	code, body, _ := do(t, "POST", e.http.URL+"/v1/observe", "application/json", []byte(`{"domain":"quota","rule":"nope","latency_ms":5}`))
	if msg := errMsg(body); code != 404 || strings.Contains(msg, "samples[") {
		t.Errorf("one sample of an unknown rule: %d %s, want 404 not naming a batch element", code, body)
	}
}
