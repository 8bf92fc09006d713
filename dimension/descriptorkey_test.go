package dimension

import (
	"net/http/httptest"
	"reflect"
	"testing"
)

// DescriptorKey gives, from a spec's text alone, the key the Extractor
// puts on the entries it produces, for every source and with Match.
func TestDescriptorKey(t *testing.T) {
	for _, tc := range []struct {
		e    EntrySpec
		want string
	}{
		{EntrySpec{Source: "remote_address"}, "remote_address"},
		{EntrySpec{Source: "header:x-api-key"}, "x-api-key"},
		{EntrySpec{Source: "query:page"}, "page"},
		{EntrySpec{Source: "method"}, "method"},
		{EntrySpec{Source: "path"}, "path"},
		{EntrySpec{Source: "host"}, "host"},
		{EntrySpec{Source: "api_key"}, "api_key"},
		{EntrySpec{Source: "user"}, "user"},
		{EntrySpec{Source: "tenant"}, "tenant"},
		{EntrySpec{Source: "generic_key", Value: "g"}, "generic_key"},
		{EntrySpec{Source: "header:X-Plan", Match: &MatchSpec{Present: true}, Value: "m"}, "header_match"},
		{EntrySpec{Source: "query:debug", Match: &MatchSpec{Present: true}, Value: "m"}, "query_match"},
		{EntrySpec{Source: "method", Match: &MatchSpec{Exact: "GET"}, Value: "m"}, "method_match"},
		{EntrySpec{Source: "remote_address", Key: "client"}, "client"},
		{EntrySpec{Source: "header:X-Plan", Key: "plan", Match: &MatchSpec{Present: true}, Value: "m"}, "plan"},
	} {
		if got := tc.e.DescriptorKey(); got != tc.want {
			t.Errorf("%+v.DescriptorKey() = %q, want %q", tc.e, got, tc.want)
		}
		spec := Spec{UserHeader: "X-User", TenantHeader: "X-Tenant", Descriptors: []DescriptorSpec{{Entries: []EntrySpec{tc.e}}}}
		x, err := NewExtractor(spec)
		if err != nil {
			t.Fatalf("%+v: %v", tc.e, err)
		}
		r := httptest.NewRequest("GET", "/?page=1&debug", nil)
		for _, h := range []string{"X-Api-Key", "X-Plan", "X-User", "X-Tenant"} {
			r.Header.Set(h, "v")
		}
		ds, err := x.Descriptors(r, nil)
		if err != nil || len(ds) != 1 || ds[0].Entries[0].Key != tc.want {
			t.Errorf("%+v: the Extractor produced %v, %v; want the key %q", tc.e, ds, err, tc.want)
		}
	}
}

// DescriptorSpecs returns the descriptors as given, as a copy.
func TestDescriptorSpecs(t *testing.T) {
	spec := Spec{Descriptors: []DescriptorSpec{
		{Entries: []EntrySpec{{Source: "remote_address"}}},
		{Entries: []EntrySpec{{Source: "api_key", SkipIfAbsent: true}, {Source: "path", Routes: []string{"/a", "/a/b"}}}},
		{Entries: []EntrySpec{{Source: "header:X-Plan", Match: &MatchSpec{Exact: "pro"}, Value: "pro"}}},
	}}
	x, err := NewExtractor(spec)
	if err != nil {
		t.Fatal(err)
	}
	got := x.DescriptorSpecs()
	if !reflect.DeepEqual(got, spec.Descriptors) {
		t.Fatalf("DescriptorSpecs() = %+v, want %+v", got, spec.Descriptors)
	}
	got[1].Entries[1].Routes[0] = "/changed"
	got[2].Entries[0].Match.Exact = "changed"
	got[0].Entries[0].Source = "changed"
	spec.Descriptors[1].Entries[1].Routes[0] = "/changed too"
	if again := x.DescriptorSpecs(); again[1].Entries[1].Routes[0] != "/a" || again[2].Entries[0].Match.Exact != "pro" || again[0].Entries[0].Source != "remote_address" {
		t.Errorf("after changing a copy and the Spec: %+v", again)
	}
}
