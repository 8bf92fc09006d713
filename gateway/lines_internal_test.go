package gateway

import (
	"net/netip"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/floodgate/floodgate/dimension"
	"github.com/floodgate/floodgate/policy"
)

// TestValidSectionCompiles: a valid section compiles to the routes it
// always did, every field of every route as written, while the problems
// of an invalid one are all collected (TestSectionProblemLines).
func TestValidSectionCompiles(t *testing.T) {
	cfg, err := policy.Load(filepath.Join("testdata", "lines", "valid.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	s := cfg.Domain("edge").Sections[SectionName].(*Section)
	px := dimension.Proxies{Trusted: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.168.1.7/32")}, Header: dimension.Forwarded}
	base := dimension.Spec{TrustedProxies: []string{"10.0.0.0/8", "192.168.1.7"}, ProxyHeader: "forwarded", IPv4Prefix: 24, IPv6Prefix: 48,
		APIKey: dimension.APIKeySpec{Header: "Authorization", Scheme: "Bearer"}, UserHeader: "x-user"}
	search, api := base, base
	search.Descriptors = []dimension.DescriptorSpec{
		{Entries: []dimension.EntrySpec{{Source: "remote_address"}, {Source: "generic_key", Value: "search"}}},
		{Entries: []dimension.EntrySpec{{Source: "header:x-plan", Match: &dimension.MatchSpec{Exact: "gold"}, Value: "gold"}, {Source: "user", SkipIfAbsent: true}}},
	}
	api.Descriptors = []dimension.DescriptorSpec{{Entries: []dimension.EntrySpec{{Source: "api_key", Default: "anonymous"}}}}
	want := []*routeSpec{
		{name: "search", host: ".example.com", wildcard: true, prefix: "/search/", foldCase: true, refuseStatus: 503, methods: []string{"GET", "HEAD", "POST"}, spec: &search, proxies: px},
		{name: "/api", prefix: "/api", refuseStatus: 503, methods: []string{"PUT"}, spec: &api, proxies: px},
		{name: "health", prefix: "/healthz", refuseStatus: 503, proxies: px},
	}
	if !reflect.DeepEqual(s.proxies, px) {
		t.Errorf("proxies = %+v, want %+v", s.proxies, px)
	}
	if len(s.compiled) != len(want) {
		t.Fatalf("%d routes, want %d", len(s.compiled), len(want))
	}
	for i, r := range s.compiled {
		if r.node == nil {
			t.Errorf("route %d: no node", i)
		}
		got := *r
		got.node = nil
		if !reflect.DeepEqual(&got, want[i]) {
			t.Errorf("route %d:\n got %+v\nwant %+v", i, got, *want[i])
		}
	}
}
