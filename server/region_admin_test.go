package server_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"testing"

	"github.com/floodgate/floodgate/policy"
	"github.com/floodgate/floodgate/server"
	"github.com/floodgate/floodgate/store/memory"
	"github.com/floodgate/floodgate/store/region"
)

// The admin API's stats say this region, the weights in force with
// their fingerprint, the decisions peers lent and each peer's state; a
// server without regions says "region": null.
func TestAdminStatsRegion(t *testing.T) {
	cfg, err := policy.Parse("r.yaml", []byte("domain: r\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: minute\n      requests_per_unit: 4\n"))
	if err != nil {
		t.Fatal(err)
	}
	mem := func() *memory.Store {
		m, err := memory.New()
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	rs, err := region.New("us", mem(), []region.Peer{{Name: "eu", Store: mem()}}, region.WithWeights(map[string]int{"us": 3, "eu": 1}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.Close() })
	eng, err := policy.NewEngine(cfg, rs)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(eng, rs)
	if err != nil {
		t.Fatal(err)
	}
	admin := httptest.NewServer(srv.AdminHandler())
	t.Cleanup(admin.Close)
	// Shares 3 and 1: the fourth decision is lent by eu, the fifth refused.
	for i := range 5 {
		resp, err := eng.Decide(context.Background(), policy.Request{Domain: "r", Descriptors: []policy.Descriptor{{Entries: []policy.Entry{{Key: "k", Value: "v"}}}}})
		if err != nil {
			t.Fatal(err)
		}
		if ok := resp.Code == policy.CodeOK; ok != (i < 4) {
			t.Fatalf("decision %d: %v, want admitted for the first 4 of the whole limit", i, resp.Code)
		}
	}
	_, body, _ := do(t, "GET", admin.URL+"/admin/api/stats", "", nil)
	var got struct {
		Region *server.RegionView `json:"region"`
	}
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	_, _, fp := rs.Regions()
	want := server.RegionView{Name: "us", Weights: map[string]int64{"us": 3, "eu": 1}, Fingerprint: fp, Borrowed: 1,
		Peers: []server.PeerView{{Name: "eu", Up: true}}}
	r := got.Region
	if r == nil || r.Name != want.Name || r.Fingerprint != want.Fingerprint || r.Borrowed != want.Borrowed ||
		len(r.Weights) != 2 || r.Weights["us"] != 3 || r.Weights["eu"] != 1 || len(r.Peers) != 1 || r.Peers[0] != want.Peers[0] {
		t.Fatalf("stats region: %+v; want %+v", r, want)
	}

	plain := serverFor(t, "domain: p\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: minute\n      requests_per_unit: 4\n")
	plainAdmin := httptest.NewServer(plain.AdminHandler())
	t.Cleanup(plainAdmin.Close)
	_, body, _ = do(t, "GET", plainAdmin.URL+"/admin/api/stats", "", nil)
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatal(err)
	}
	if r, ok := m["region"]; !ok || string(r) != "null" {
		t.Fatalf("stats of a server without regions: region %s, want null: %s", r, body)
	}
}
