package server

import (
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/policy"
)

// TestLeaseTokenRoundTrip: a token of several slots decodes to the
// leases it was made of.
func TestLeaseTokenRoundTrip(t *testing.T) {
	ls := []policy.Lease{
		{Key: "fg:d|job=x#concurrency:0", Cost: 1, ID: 1<<63 | 5, Limit: 2, TTL: 30 * time.Second},
		{Key: "fg:d|job=x#concurrency:0~p.gold", Cost: 3, ID: 7, Limit: 1 << 20, TTL: time.Microsecond},
		{Key: "fg:d|" + strings.Repeat("k", 300) + "#concurrency:0", Cost: 1, ID: math.MaxUint64, Limit: 1, TTL: time.Hour},
	}
	tok := encodeLease(ls)
	if strings.ContainsAny(tok, "+/=") {
		t.Fatalf("token %q is not unpadded URL-safe base64", tok)
	}
	got, err := decodeLease(tok)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, ls) {
		t.Fatalf("decodeLease(encodeLease(%+v)) = %+v", ls, got)
	}
}

// FuzzDecodeLease: any string decodes without panicking, and what decodes
// encodes to a token that decodes the same.
func FuzzDecodeLease(f *testing.F) {
	f.Add(encodeLease([]policy.Lease{{Key: "fg:d|job=x#concurrency:0", Cost: 1, ID: 9, Limit: 2, TTL: time.Minute}}))
	f.Add("")
	f.Add("AQ")
	f.Add("AQEAAAAAAA")
	f.Fuzz(func(t *testing.T, tok string) {
		ls, err := decodeLease(tok)
		if err != nil {
			return
		}
		again, err := decodeLease(encodeLease(ls))
		if err != nil || !reflect.DeepEqual(again, ls) {
			t.Fatalf("decodeLease(%q) = %+v, which encodes to a token decoding to %+v, %v", tok, ls, again, err)
		}
	})
}
