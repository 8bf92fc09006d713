package names

import (
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
