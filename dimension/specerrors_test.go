package dimension_test

import (
	"errors"
	"testing"

	"github.com/floodgate/floodgate/dimension"
)

// TestNewExtractorReportsEveryProblem: NewExtractor reports each problem of
// a Spec, in field order, and none that only follows from another; one
// problem is a *SpecError as it always was, several are joined with the
// first one found by errors.As.
func TestNewExtractorReportsEveryProblem(t *testing.T) {
	e := func(src string) dimension.EntrySpec { return dimension.EntrySpec{Source: src} }
	for _, tc := range []struct {
		name string
		spec dimension.Spec
		want []dimension.SpecError
	}{
		{"one", dimension.Spec{IPv4Prefix: 33, Descriptors: []dimension.DescriptorSpec{{Entries: []dimension.EntrySpec{e("remote_address")}}}},
			[]dimension.SpecError{{Field: "ipv4_prefix", Msg: "33 is not in 1..32"}}},
		{"shared fields and entries", dimension.Spec{
			TrustedProxies: []string{"10.0.0.0/8", "nope", "::1/200"},
			ProxyHeader:    "x-forwarded-fur",
			IPv4Prefix:     33, // not reported again for the remote_address entry that inherits it
			IPv6Prefix:     -1,
			APIKey:         dimension.APIKeySpec{Header: "a b"},
			UserHeader:     "u:h", // not reported again for the user entry
			TenantHeader:   "t h",
			Descriptors: []dimension.DescriptorSpec{
				{Entries: []dimension.EntrySpec{e("remote_address"), e("user"), e("tenant"), {Source: "generic_key"}}},
				{},
				{Entries: []dimension.EntrySpec{{Source: "bogus", Value: "v", Routes: []string{"/a"}}, {Source: "method", Default: "x", SkipIfAbsent: true, IPv4Prefix: 8}}},
			},
		}, []dimension.SpecError{
			{Field: "trusted_proxies[1]", Msg: `"nope" is not a CIDR or an IP address`},
			{Field: "trusted_proxies[2]", Msg: `"::1/200" is not a CIDR or an IP address`},
			{Field: "proxy_header", Msg: `unknown proxy header "x-forwarded-fur" (want X-Forwarded-For, Forwarded or X-Real-IP)`},
			{Field: "ipv4_prefix", Msg: "33 is not in 1..32"},
			{Field: "ipv6_prefix", Msg: "-1 is not in 1..128"},
			{Field: "api_key.header", Msg: `"a b" is not a valid header name`},
			{Field: "user_header", Msg: `"u:h" is not a valid header name`},
			{Field: "tenant_header", Msg: `"t h" is not a valid header name`},
			{Field: "descriptors[0].entries[3].value", Msg: "generic_key needs a value"},
			{Field: "descriptors[1].entries", Msg: "no entries"},
			{Field: "descriptors[2].entries[0].source", Msg: `unknown source "bogus" (want remote_address, header:<Name>, query:<name>, method, path, host, api_key, user, tenant or generic_key)`},
			{Field: "descriptors[2].entries[1].default", Msg: "default and skip_if_absent exclude each other"},
			{Field: "descriptors[2].entries[1].ipv4_prefix", Msg: "only remote_address takes a prefix length"},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := dimension.NewExtractor(tc.spec)
			var first *dimension.SpecError
			if !errors.As(err, &first) || *first != tc.want[0] {
				t.Fatalf("NewExtractor = %v, want first %v", err, &tc.want[0])
			}
			var got []dimension.SpecError
			if j, ok := err.(interface{ Unwrap() []error }); ok {
				for _, e := range j.Unwrap() {
					got = append(got, *e.(*dimension.SpecError))
				}
			} else {
				got = append(got, *first)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("NewExtractor = %d problems, want %d:\n%v", len(got), len(tc.want), err)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Errorf("problem %d = %v, want %v", i, &got[i], &tc.want[i])
				}
			}
		})
	}
}
