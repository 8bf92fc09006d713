package memcached

import (
	"strings"
	"testing"
)

func TestParseURL(t *testing.T) {
	good := []struct {
		url  string
		want string
	}{
		{"memcached://127.0.0.1:11211", "127.0.0.1:11211"},
		{"memcached://127.0.0.1:11211/", "127.0.0.1:11211"},
		{"MEMCACHED://a:1,b:2", "a:1 b:2"},
		{"memcached://a:1, b:2", "a:1 b:2"},
		{"memcached://cache", "cache:11211"},
		{"memcached://[::1]:11212", "[::1]:11212"},
		{"memcached://[::1]", "[::1]:11211"},
	}
	for _, tt := range good {
		got, err := ParseURL(tt.url)
		if err != nil {
			t.Errorf("ParseURL(%q): %v", tt.url, err)
			continue
		}
		if strings.Join(got, " ") != tt.want {
			t.Errorf("ParseURL(%q) = %q, want %q", tt.url, got, tt.want)
		}
	}
	bad := []struct{ url, wantErr string }{
		{"redis://a:1", "want memcached://"},
		{"memcached://", "no server"},
		{"memcached://a:1,,b:2", "server 2 is empty"},
		{"memcached://a:0", "port must be 1-65535"},
		{"memcached://a:99999", "port must be 1-65535"},
		{"memcached://a:x", "port must be 1-65535"},
		{"memcached://:11211", "has no host"},
		{"memcached://a:1,a:1", "listed twice"},
		{"memcached://a:1/db", `unexpected "/db"`},
		{"memcached://a:1?timeout=1s", "unexpected"},
		{"memcached://u@a:1", "unexpected"},
	}
	for _, tt := range bad {
		_, err := ParseURL(tt.url)
		if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), tt.url) {
			t.Errorf("ParseURL(%q) error = %v, want one naming the URL and %q", tt.url, err, tt.wantErr)
		}
	}
}

func FuzzParseURL(f *testing.F) {
	for _, s := range []string{"memcached://a:1", "memcached://[::1]:2,b", "memcached://,", "memcached://[", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		servers, err := ParseURL(s)
		if err == nil && len(servers) == 0 {
			t.Fatalf("ParseURL(%q) = no servers and no error", s)
		}
	})
}
