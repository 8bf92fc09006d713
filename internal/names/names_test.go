package names

import (
	"flag"
	"io"
	"strings"
	"testing"
)

func TestEditDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"", "", 0},
		{"store", "store", 0},
		{"stor", "store", 1},     // insertion
		{"stores", "store", 1},   // deletion
		{"stpre", "store", 1},    // substitution
		{"sotre", "store", 2},    // a transposition is two edits
		{"", "store", 5},         // all insertions
		{"kitten", "sitting", 3}, // the textbook case
		{"burts", "burst", 2},    //
		{"quota_mod", "quota_mode", 1},
	} {
		if got := EditDistance(tc.a, tc.b); got != tc.want {
			t.Errorf("EditDistance(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
		if got := EditDistance(tc.b, tc.a); got != tc.want {
			t.Errorf("EditDistance(%q, %q) = %d, want %d (symmetric)", tc.b, tc.a, got, tc.want)
		}
	}
	long := strings.Repeat("x", 65)
	if got := EditDistance(long, "x"); got != 65 {
		t.Errorf("a 65-byte name: %d, want its length 65 without computing", got)
	}
}

func TestClosest(t *testing.T) {
	known := []string{"store", "store-timeout", "http", "grpc", "limit", "lease-slice"}
	for _, tc := range []struct{ s, want string }{
		{"stor", "store"},               // one edit, and a prefix
		{"stroe", "store"},              // two edits
		{"store-time", "store-timeout"}, // a prefix, three edits away
		{"limt", "limit"},
		{"x", ""},      // one letter suggests nothing
		{"h", ""},      // not even as a prefix
		{"zzzzzz", ""}, // nothing near
		{"grpcs", "grpc"},
	} {
		if got := Closest(tc.s, known); got != tc.want {
			t.Errorf("Closest(%q) = %q, want %q", tc.s, got, tc.want)
		}
	}
}

func TestFlagHint(t *testing.T) {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.String("store", "", "")
	fs.Bool("q", false, "")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--stor", "x"}, " (did you mean --store?)"},
		{[]string{"-qq"}, " (did you mean -q?)"},
		{[]string{"--zzzzzz"}, ""},
		{[]string{"--store"}, ""}, // another error: a missing value
	} {
		err := fs.Parse(tc.args)
		if got := FlagHint(fs, err); got != tc.want {
			t.Errorf("%v: FlagHint = %q (error %v), want %q", tc.args, got, err, tc.want)
		}
	}
}
