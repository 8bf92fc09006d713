package server_test

import (
	"encoding/json"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
)

// A /v1 request whose priority names no class of its domain is decided in
// the default class, and said so nowhere: the answer's priority read as
// if the client had asked for it. /v1/decide and /v1/peek answer
// "priority_unknown": true for it (and leave the field out otherwise), and
// floodgate_priority_unknown_total{domain} counts the decided ones, not
// the peeks, as decisions_total does.
func TestV1PriorityUnknown(t *testing.T) {
	srv := serverFor(t, `
domain: api
priorities: [high, low]
default_priority: low
descriptors:
  - key: client
    rate_limit: {unit: second, requests_per_unit: 100, strategy: wait, max_wait: 1s}
---
domain: batch
priorities: [urgent, bulk]
descriptors:
  - key: job
    rate_limit: {unit: second, requests_per_unit: 100}
`)
	h := httptest.NewServer(srv.HTTPHandler())
	t.Cleanup(h.Close)
	body := func(prio string, wait bool) map[string]any {
		b := map[string]any{"domain": "api", "descriptors": []any{desc("client", "a")}}
		if prio != "" {
			b["priority"] = prio
		}
		if wait {
			b["wait"] = true
		}
		return b
	}
	// answer decodes a /v1 answer (one result of a batch) as raw fields.
	answer := func(t *testing.T, raw []byte) map[string]json.RawMessage {
		t.Helper()
		var out map[string]json.RawMessage
		if err := json.Unmarshal(raw, &out); err != nil {
			t.Fatalf("%v: %s", err, raw)
		}
		return out
	}
	for _, tc := range []struct {
		name, path, prio string
		wait             bool
		unknown          bool
		class            string
	}{
		{"decide unknown", "/v1/decide", "hgih", false, true, "low"},
		{"decide wait unknown", "/v1/decide", "nope", true, true, "low"},
		{"decide known", "/v1/decide", " High ", false, false, "high"},
		{"decide default", "/v1/decide", "", false, false, "low"},
		{"decide another domain's class", "/v1/decide", "urgent", false, true, "low"},
		{"peek unknown", "/v1/peek", "hgih", false, true, "low"},
		{"peek known", "/v1/peek", "low", false, false, "low"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, raw, _ := postJSON(t, h.URL+tc.path, body(tc.prio, tc.wait))
			if code != 200 {
				t.Fatalf("%d %s", code, raw)
			}
			out := answer(t, raw)
			got, has := out["priority_unknown"]
			switch {
			case tc.unknown && string(got) != "true":
				t.Errorf("priority %q: priority_unknown %s, want true: %s", tc.prio, got, raw)
			case !tc.unknown && has:
				t.Errorf("priority %q: priority_unknown %s, want the field left out: %s", tc.prio, got, raw)
			}
			if want := `"` + tc.class + `"`; string(out["priority"]) != want {
				t.Errorf("priority %q: decided in %s, want %s", tc.prio, out["priority"], want)
			}
		})
	}
	// In a batch, each result says so on its own.
	code, raw, _ := postJSON(t, h.URL+"/v1/decide", map[string]any{"requests": []any{body("hgih", false), body("high", false)}})
	if code != 200 {
		t.Fatalf("batch: %d %s", code, raw)
	}
	var batch struct {
		Results []map[string]json.RawMessage `json:"results"`
	}
	if err := json.Unmarshal(raw, &batch); err != nil || len(batch.Results) != 2 {
		t.Fatalf("batch: %v %s", err, raw)
	}
	if got := string(batch.Results[0]["priority_unknown"]); got != "true" {
		t.Errorf("batch: the unknown class's result has priority_unknown %q, want true: %s", got, raw)
	}
	if _, has := batch.Results[1]["priority_unknown"]; has {
		t.Errorf("batch: the known class's result has priority_unknown: %s", raw)
	}

	rec := httptest.NewRecorder()
	srv.Metrics().Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	text, _ := io.ReadAll(rec.Body)
	// Decided: hgih, nope (waiting), urgent, and the batch's hgih.
	for _, want := range []string{
		`floodgate_priority_unknown_total{domain="api"} 4`,
		`floodgate_priority_unknown_total{domain="batch"} 0`,
	} {
		if !strings.Contains(string(text), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if t.Failed() {
		for _, l := range strings.Split(string(text), "\n") {
			if strings.Contains(l, "priority_unknown") {
				t.Log(l)
			}
		}
	}
}
