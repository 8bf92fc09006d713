package memcached

import (
	"errors"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/floodgate/floodgate/store"
)

func TestParseURL(t *testing.T) {
	good := []struct {
		url  string
		want string
	}{
		{"memcached://127.0.0.1:11211", "127.0.0.1:11211"},
		{"memcached://127.0.0.1:11211/", "127.0.0.1:11211"},
		{"MEMCACHED://a:1,b:2", "a:1 b:2"},
		{"memcached://cache", "cache:11211"},
		{"memcached://[::1]:11212", "[::1]:11212"},
		{"memcached://[::1]", "[::1]:11211"},
		{"memcached://127.0.0.1:021211", "127.0.0.1:21211"},
		{"memcached://[::1]:0011212,b:0002", "[::1]:11212 b:2"},
		{"memcacheds://cache.example:11212,10.0.0.2", "cache.example:11212 10.0.0.2:11211"},
		{"MemcacheDS://a:1", "a:1"},
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
		{"redis://a:1", "want memcached://host:port[,host:port], or memcacheds://… for TLS"},
		{"memcachedss://a:1", "want memcached://"},
		{"memcacheds://", "no server"},
		{"memcacheds://a:1?tls=1", "query parameters"},
		{"memcacheds://a:1/0", `unexpected path "/0"`},
		{"memcacheds://a:1,a:1", "listed twice"},
		{"memcached://", "no server"},
		{"memcached://a:1,,b:2", "server 2 is empty"},
		{"memcached://a:0", "port must be 1-65535"},
		{"memcached://a:99999", "port must be 1-65535"},
		{"memcached://a:x", "port must be 1-65535"},
		{"memcached://:11211", "empty host"},
		{"memcached://a:1,a:1", "listed twice"},
		{"memcached://127.0.0.1:21211,127.0.0.1:021211", `server "127.0.0.1:21211" is listed twice`},
		{"memcached://127.0.0.1:21211,127.0.0.1:+21211", `server 2 "127.0.0.1:+21211": port must be 1-65535, got "+21211"`},
		{"memcached://a:1, b:2", `server 2 " b:2": the host holds a space`},
		{"memcached://Cache1:21211,cache1:21211", `server "cache1:21211" is listed twice`},
		{"memcached://a:-1", "port must be 1-65535"},
		{"memcached://a:+-1", "port must be 1-65535"},
		{"memcached://a:00", "port must be 1-65535"},
		{"memcached://a:065536", "port must be 1-65535"},
		{"memcached://a:1_1", "port must be 1-65535"},
		{"memcached://a:1/db", `unexpected path "/db"`},
		{"memcached://a:1?timeout=1s", "query parameters"},
		{"memcached://a:1#x", "fragments"},
		{"memcached://a:1,b:2/", ""},
	}
	for _, tt := range bad {
		if tt.wantErr == "" {
			continue
		}
		_, err := ParseURL(tt.url)
		if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), tt.url) {
			t.Errorf("ParseURL(%q) error = %v, want one naming the URL and %q", tt.url, err, tt.wantErr)
		}
	}
}

// TestPortWrittenTwoWaysPlacesAlike: a port with leading zeros names the
// same server, so instances configured each way place every key alike
// (before, 127.0.0.1:021212 hashed as another server and about a third of
// the keys went elsewhere).
func TestPortWrittenTwoWaysPlacesAlike(t *testing.T) {
	plain, err := ParseURL("memcached://127.0.0.1:21211,127.0.0.1:21212,127.0.0.1:21213")
	if err != nil {
		t.Fatal(err)
	}
	odd, err := ParseURL("memcached://127.0.0.1:21211,127.0.0.1:021212,127.0.0.1:0021213")
	if err != nil {
		t.Fatal(err)
	}
	r1, err := newRing(plain)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := newRing(odd)
	if err != nil {
		t.Fatal(err)
	}
	moved := 0
	for i := range 3000 {
		k := "fg:user:" + strings.Repeat("x", i%7) + string(rune('a'+i%26)) + strconv.Itoa(i) + "%%s"
		if r1.addrs[r1.server(k)].String() != r2.addrs[r2.server(k)].String() {
			moved++
		}
	}
	if moved > 0 {
		t.Errorf("%d of 3000 keys placed on another server when two ports are written with leading zeros", moved)
	}
}

// TestParseURLRefusesCredentials: memcached takes no credentials, and
// ParseURL and Open say so without showing any of them, whatever the
// password holds ('/', '?', '#', ':', '@', escapes): the errors quote the
// URL as store.RedactURL shows it. Every password starts with "Sup3r" and
// ends with "Secr3t" so that a partial leak shows too.
func TestParseURLRefusesCredentials(t *testing.T) {
	passwords := []string{"Sup3r-Secr3t", "Sup3r/Secr3t", "Sup3r?Secr3t", "Sup3r#Secr3t", "Sup3r@Secr3t",
		"Sup3r:Secr3t", "Sup3r@ss:w0rd%23Secr3t", "Sup3r%2F%3F%23%40%3ASecr3t", "Sup3r/@?#:%25Secr3t", "Sup3r%zzSecr3t"}
	forms := []string{
		"memcached://:PW@127.0.0.1:1",
		"memcached://bob:PW@127.0.0.1:1,127.0.0.1:2",
		"memcached://PW@127.0.0.1:1",
		"MEMCACHED://bob:PW@127.0.0.1:1/",
		"memcached://bob:PW@127.0.0.1:99999",
		"memcached://bob:PW@127.0.0.1:1/x",
		"memcached://bob:PW@127.0.0.1:1?timeout=1s",
		"memcacheds://bob:PW@127.0.0.1:1",
		"memcacheds://PW@127.0.0.1:1,127.0.0.1:2",
		"MEMCACHEDS://bob:PW@127.0.0.1:1/x",
	}
	leaks := func(s, pw string) bool {
		for _, w := range []string{"Sup3r", "Secr3t", pw, url.PathEscape(pw), url.QueryEscape(pw)} {
			if strings.Contains(s, w) {
				return true
			}
		}
		return false
	}
	for _, f := range forms {
		for _, pw := range passwords {
			raw := strings.Replace(f, "PW", pw, 1)
			_, err := ParseURL(raw)
			switch {
			case err == nil:
				t.Errorf("ParseURL(%q) accepted credentials", raw)
			case leaks(err.Error(), pw):
				t.Errorf("ParseURL(%q) = %v: the password shows", raw, err)
			case !strings.Contains(err.Error(), "memcached takes no user name or password"):
				t.Errorf("ParseURL(%q) = %v, want it to say that memcached takes no credentials", raw, err)
			case !strings.Contains(err.Error(), store.RedactURL(raw)):
				t.Errorf("ParseURL(%q) = %v, want it to quote %q", raw, err, store.RedactURL(raw))
			case strings.Contains(err.Error(), "bob"):
				// All of a memcached URL's user information is hidden,
				// memcacheds:// too.
				t.Errorf("ParseURL(%q) = %v: the user name shows", raw, err)
			}
			if s, err := Open(raw); err == nil {
				s.Close()
				t.Errorf("Open(%q) succeeded", raw)
			} else if leaks(err.Error(), pw) {
				t.Errorf("Open(%q) = %v: the password shows", raw, err)
			}
		}
	}
	// A query or fragment is refused without being quoted in the reason.
	for _, raw := range []string{"memcached://127.0.0.1:1?password=Sup3r-Secr3t", "memcached://127.0.0.1:1#Sup3r/Secr3t"} {
		_, err := ParseURL(raw)
		if err == nil || !strings.Contains(err.Error(), "not supported") {
			t.Errorf("ParseURL(%q) = %v, want a refusal of the query or fragment", raw, err)
			continue
		}
		reason := strings.TrimPrefix(err.Error(), "memcached: store URL "+`"`+store.RedactURL(raw)+`": `)
		if leaks(reason, "Sup3r-Secr3t") || errors.Unwrap(err) != nil {
			t.Errorf("ParseURL(%q) = %v: the reason quotes the query or fragment", raw, err)
		}
	}
}

func FuzzParseURL(f *testing.F) {
	for _, s := range []string{"memcached://a:1", "memcacheds://a:1", "memcached://[::1]:2,b", "memcached://,", "memcached://[", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		servers, err := ParseURL(s)
		if err == nil && len(servers) == 0 {
			t.Fatalf("ParseURL(%q) = no servers and no error", s)
		}
	})
}

// TestParseURLNamesControlCharacters: a URL read with a line end (from an
// environment variable or a file) or holding a tab is refused in one line
// that says so, the character quoted, whatever part of the URL it is in;
// the reason the host list gives stays. Before, "…:11211\n" was refused
// only as `port must be 1-65535, got "11211\n"`. A password around such a
// character still never shows.
func TestParseURLNamesControlCharacters(t *testing.T) {
	cases := []struct{ url, want string }{
		{"memcached://127.0.0.1:11211\n", `port must be 1-65535, got "11211\n" (the URL ends with "\n"`},
		{"memcached://127.0.0.1:11211\r\n", `(the URL ends with "\r\n"`},
		{"memcached://127.0.0.1:11211 ", `(the URL ends with " "`},
		{"memcached://a:1,b:2/\n", `unexpected path "/\n": only a list of host:port is allowed (the URL ends with "\n"`},
		{"memcached://cache\n", `the host holds a space or a control character (the URL ends with "\n"`},
		{"memcached://127.0.0.1:\t11211", `port must be 1-65535, got "\t11211" (the URL holds the control character "\t")`},
		{"memcached://127.0.0.1\t:11211", `the host holds a space or a control character (the URL holds the control character "\t")`},
		{"memcached://a:1\x00,b:2", `(the URL holds the control character "\x00")`},
		{"\nmemcached://a:1", `want memcached://host:port[,host:port], or memcacheds://… for TLS (the URL starts with "\n"`},
		{"memcached://bob:Sup3r\tSecr3t@a:1\n", `memcached takes no user name or password (remove what precedes '@'): its text protocol has no authentication; firewall the port instead (the URL ends with "\n"`},
	}
	for _, tt := range cases {
		_, err := ParseURL(tt.url)
		if err == nil {
			t.Errorf("ParseURL(%q) accepted it", tt.url)
			continue
		}
		msg := err.Error()
		if !strings.Contains(msg, tt.want) || !strings.Contains(msg, strconv.Quote(store.RedactURL(tt.url))) {
			t.Errorf("ParseURL(%q) = %v, want it to quote the URL and say %s", tt.url, err, tt.want)
		}
		if strings.ContainsFunc(msg, func(r rune) bool { return r < ' ' || r == 0x7f }) {
			t.Errorf("ParseURL(%q) = %q, want one line without control characters", tt.url, msg)
		}
		if strings.Contains(msg, "Sup3r") || strings.Contains(msg, "Secr3t") {
			t.Errorf("ParseURL(%q) = %v: the password shows", tt.url, err)
		}
		if s, oerr := Open(tt.url); oerr == nil {
			s.Close()
			t.Errorf("Open(%q) succeeded", tt.url)
		} else if oerr.Error() != msg {
			t.Errorf("Open(%q) = %v, want ParseURL's error %v", tt.url, oerr, err)
		}
	}
}
