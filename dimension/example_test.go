package dimension_test

import (
	"fmt"
	"log"
	"net/http/httptest"
	"net/netip"

	"github.com/floodgate/floodgate/dimension"
)

// One descriptor per client network and one per API key and route, for a
// service behind a load balancer in 10.0.0.0/8.
func ExampleExtractor() {
	x, err := dimension.NewExtractor(dimension.Spec{
		TrustedProxies: []string{"10.0.0.0/8"},
		Descriptors: []dimension.DescriptorSpec{
			{Entries: []dimension.EntrySpec{{Source: "remote_address"}}},
			{Entries: []dimension.EntrySpec{
				{Source: "api_key"},
				{Source: "path", Routes: []string{"/v1/search", "/v1/"}},
			}},
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	r := httptest.NewRequest("GET", "/v1/search/items?q=x", nil)
	r.RemoteAddr = "10.0.0.7:41000" // the load balancer
	r.Header.Set("X-Forwarded-For", "198.51.100.1, 2001:db8:abcd:12:1::5")
	r.Header.Set("X-API-Key", "k-123")
	ds, err := x.Descriptors(r, nil)
	if err != nil {
		log.Fatal(err)
	}
	for _, d := range ds {
		fmt.Println(d.Entries)
	}
	// Output:
	// [{remote_address 2001:db8:abcd:12::/64}]
	// [{api_key k-123} {path /v1/search}]
}

// The forwarding header counts only when the peer is a trusted proxy.
func ExampleClientIP() {
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set("X-Forwarded-For", "203.0.113.50")

	r.RemoteAddr = "198.51.100.7:5000" // a client: the header is ignored
	fmt.Println(dimension.ClientIP(r, trusted))
	r.RemoteAddr = "10.1.2.3:5000" // a trusted proxy: the header is read
	fmt.Println(dimension.ClientIP(r, trusted))
	// Output:
	// 198.51.100.7
	// 203.0.113.50
}
