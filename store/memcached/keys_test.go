package memcached

import (
	"strings"
	"testing"
)

func TestEncodeKey(t *testing.T) {
	long := strings.Repeat("a", maxEncodedKey+1)
	tests := []struct {
		name, key, want string
	}{
		{"plain", "user:42", "user:42"},
		{"space", "a b", "a%20b"},
		{"percent", "50%", "50%25"},
		{"control", "a\nb\x00", "a%0Ab%00"},
		{"utf8", "é", "%C3%A9"},
		{"del", "\x7f", "%7F"},
		{"longest plain", long[:maxEncodedKey], long[:maxEncodedKey]},
		{"too long", long, "%HFmjrT61Tuns3sjO8uBn0oMOO4qbQPiBBNO3MiCu1aug"},
	}
	for _, tt := range tests {
		if got := string(encodeKey(nil, tt.key)); got != tt.want {
			t.Errorf("%s: encodeKey(%q) = %q, want %q", tt.name, tt.key, got, tt.want)
		}
	}
}

func TestKeyerLayout(t *testing.T) {
	k := keyer{prefix: "fg:"}
	if got, want := k.state("a b"), "fg:a%20b%%s"; got != want {
		t.Errorf("state = %q, want %q", got, want)
	}
	if got, want := k.fixed("k", 60_000_000), "fg:k%%f:60000000"; got != want {
		t.Errorf("fixed = %q, want %q", got, want)
	}
	got := k.sliding("k", 500, 10, 2)
	want := []string{"fg:k%%w:500:10", "fg:k%%w:500:9", "fg:k%%w:500:8"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("sliding = %q, want %q", got, want)
	}
	for _, mk := range append(got, k.state("k"), k.fixed("k", 1)) {
		if h := hashPart(mk); h != "fg:k" {
			t.Errorf("hashPart(%q) = %q, want %q: every entry of a key must share a server", mk, h, "fg:k")
		}
	}
}

// legal reports whether s is a key memcached's text protocol accepts.
func legal(s string) bool {
	if len(s) > 250 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] >= 0x7f {
			return false
		}
	}
	return true
}

// FuzzEncodeKey checks that every key maps to a legal memcached key whose
// tag cannot be confused with its body, and that distinct keys never share
// an encoding.
func FuzzEncodeKey(f *testing.F) {
	for _, s := range []string{"", "a", "a b", "%", "%%", "%H", "%41", "A", strings.Repeat("ü", 90)} {
		f.Add(s, s+"x")
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		k := keyer{prefix: strings.Repeat("p", maxPrefix)}
		ea := string(encodeKey(nil, a))
		if strings.Contains(ea, tagSep) {
			t.Fatalf("encodeKey(%q) = %q contains the tag separator", a, ea)
		}
		for _, mk := range append(k.sliding(a, 1<<62, -1<<62, 0), k.state(a), k.fixed(a, -1<<62)) {
			if !legal(mk) {
				t.Fatalf("key %q gives an illegal memcached key %q (%d bytes)", a, mk, len(mk))
			}
			if hashPart(mk) != k.prefix+ea {
				t.Fatalf("hashPart(%q) = %q, want %q", mk, hashPart(mk), k.prefix+ea)
			}
		}
		if a != b && ea == string(encodeKey(nil, b)) {
			t.Fatalf("keys %q and %q share the encoding %q", a, b, ea)
		}
	})
}
