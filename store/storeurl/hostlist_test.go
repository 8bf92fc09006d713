package storeurl_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/floodgate/floodgate/store/memcached"
	"github.com/floodgate/floodgate/store/redis"
	"github.com/floodgate/floodgate/store/storeurl"
)

// hostListCases are host lists (what follows "scheme://" or the
// credentials' '@') and what every store URL makes of them. In want, DEF
// stands for the store's default port; a list that needs it is refused
// where there is none (redis-cluster://, redis-sentinel://).
var hostListCases = []struct {
	list string
	want string // the addresses, space-separated; "" when refused
	err  string // part of the reason when refused
}{
	{list: "h:1", want: "h:1"},
	{list: "h:65535", want: "h:65535"},
	{list: "h:011211", want: "h:11211"},
	{list: "h:00001", want: "h:1"},
	{list: "h", want: "h:DEF"},
	{list: "Cache-1.example.com:7000", want: "Cache-1.example.com:7000"},
	{list: "[::1]:7000", want: "[::1]:7000"},
	{list: "[::1]:07000", want: "[::1]:7000"},
	{list: "[::1]", want: "[::1]:DEF"},
	{list: "[fe80::1%eth0]:1", want: "[fe80::1%eth0]:1"},
	{list: "[fe80::1%25eth0]:1", want: "[fe80::1%eth0]:1"},
	{list: "[fe80::1%25eth0]", want: "[fe80::1%eth0]:DEF"},
	{list: "[fe80::1%25en%2D0]:1", want: "[fe80::1%en-0]:1"},
	{list: "[fe80::1%2525]:1", want: "[fe80::1%25]:1"},
	{list: "[fe80::1%25]:1", err: "empty IPv6 zone after %25"},
	{list: "[fe80::1%]:1", err: "empty IPv6 zone after %"},
	{list: "[fe80::1%25e%zz]:1", err: "the IPv6 zone after %25 is not properly percent-encoded"},
	{list: "[fe80::1%25e%20]:1", err: "the IPv6 zone holds a space or a control character"},
	{list: "[fe80::1%25eth0]:1,[fe80::1%eth0]:01", err: `"[fe80::1%eth0]:1" is listed twice`},
	{list: "a:1,b:2", want: "a:1 b:2"},
	{list: "[::1]:1,[::2]:1,c", want: "[::1]:1 [::2]:1 c:DEF"},

	{list: "h:+11211", err: `"h:+11211": port must be 1-65535, got "+11211"`},
	{list: "h:-1", err: `port must be 1-65535, got "-1"`},
	{list: "h:+-1", err: `port must be 1-65535, got "+-1"`},
	{list: "h: 1", err: `port must be 1-65535, got " 1"`},
	{list: "h:1 ", err: `port must be 1-65535, got "1 "`},
	{list: "h:1\n", err: `port must be 1-65535, got "1\n"`},
	{list: "h:", err: `"h:": port must be 1-65535, got ""`},
	{list: "h:0", err: `port must be 1-65535, got "0"`},
	{list: "h:00", err: `port must be 1-65535, got "00"`},
	{list: "h:65536", err: `port must be 1-65535, got "65536"`},
	{list: "h:065536", err: `port must be 1-65535, got "065536"`},
	{list: "h:99999999999999999999", err: `port must be 1-65535, got "99999999999999999999"`},
	{list: "h:0x10", err: `port must be 1-65535, got "0x10"`},
	{list: "h:1_0", err: `port must be 1-65535, got "1_0"`},
	{list: "h:１", err: `port must be 1-65535, got "１"`},
	{list: "h:x", err: `port must be 1-65535, got "x"`},
	{list: "[::1]:", err: `port must be 1-65535, got ""`},
	{list: "[::1]:+1", err: `port must be 1-65535, got "+1"`},
	{list: " h:1", err: `" h:1": the host holds a space or a control character`},
	{list: "a b:1", err: "the host holds a space or a control character"},
	{list: "[a b]:1", err: "the host holds a space or a control character"},
	{list: "h\x00:1", err: "the host holds a space or a control character"},
	{list: ":1", err: `":1": empty host`},
	{list: "[]:1", err: "empty host"},
	{list: "[]:", err: "empty host"},
	{list: "::1", err: `"::1": want host:port`},
	{list: "::1:7000", err: "an IPv6 address goes in brackets: [::1]:port"},
	{list: "[::1", err: `"[::1": want host:port`},
	{list: "a]", err: `"a]": want host:port`},
	{list: "h:1:2", err: `"h:1:2": want host:port`},
	{list: "a:1,,b:2", err: "2 is empty"},
	{list: ",a:1", err: "1 is empty"},
	{list: "a:1,", err: "2 is empty"},
	{list: "a:1, b:2", err: `2 " b:2": the host holds a space or a control character`},
	{list: "a:1,b:+2", err: `2 "b:+2": port must be 1-65535, got "+2"`},
	{list: "a:1,a:1", err: `"a:1" is listed twice`},
	{list: "A:1,a:01", err: `"a:1" is listed twice`},
	{list: "[::1]:5,b:1,[::1]:005", err: `"[::1]:5" is listed twice`},
}

// TestHostListsAlike: memcached:// and every Redis URL read a host list by
// the same rule (package hostlist) and give the same reasons, naming the
// member; storeurl.Open passes the reason on. memcached:// took a port
// with a '+' (+11211), spaces around a member or in a host, "a]" and
// duplicates the Redis URLs took or refused otherwise; redis:// took "[::1"
// and "a]" as a host; redis-cluster:// and redis-sentinel:// took a server
// listed twice; the empty member of a Redis list was quoted as "".
func TestHostListsAlike(t *testing.T) {
	type parser struct {
		name, prefix, noun, defPort string
		several                     bool // takes more than one host
		parse                       func(string) ([]string, error)
	}
	redisParse := func(raw string) ([]string, error) {
		e, err := redis.ParseURL(raw)
		if err == nil && len(e.Addrs) == 0 {
			t.Errorf("redis.ParseURL(%q) = no address and no error", raw)
		}
		if err != nil && !errors.Is(err, redis.ErrBadURL) {
			t.Errorf("redis.ParseURL(%q) = %v, not an ErrBadURL", raw, err)
		}
		return e.Addrs, err
	}
	parsers := []parser{
		{"memcached", "memcached://", "server", "11211", true, memcached.ParseURL},
		{"redis", "redis://", "address", "6379", false, redisParse},
		{"rediss with credentials", "rediss://u:Secr3t@", "address", "6379", false, redisParse},
		{"redis-cluster", "redis-cluster://", "address", "", true, redisParse},
		{"redis-cluster with credentials", "redis-cluster://:Secr3t@", "address", "", true, redisParse},
		{"redis-sentinel", "redis-sentinel://u:Secr3t@mymaster@", "address", "", true, redisParse},
	}
	for _, p := range parsers {
		for _, tc := range hostListCases {
			raw := p.prefix + tc.list
			several := strings.Contains(tc.list, ",")
			if several && !p.several {
				continue
			}
			got, err := p.parse(raw)
			want, wantErr := tc.want, tc.err
			if strings.Contains(want, "DEF") {
				if p.defPort == "" {
					want, wantErr = "", "want host:port"
				} else {
					want = strings.ReplaceAll(want, "DEF", p.defPort)
				}
			}
			if want != "" {
				if err != nil || strings.Join(got, " ") != want {
					t.Errorf("%s: ParseURL(%q) = %q, %v; want %q", p.name, raw, got, err, want)
				}
				continue
			}
			if err == nil {
				t.Errorf("%s: ParseURL(%q) = %q, want an error saying %s", p.name, raw, got, wantErr)
				continue
			}
			msg := err.Error()
			if !strings.Contains(msg, wantErr) || !strings.Contains(msg, p.noun) {
				t.Errorf("%s: ParseURL(%q) = %v, want an error naming the %s and saying %s", p.name, raw, err, p.noun, wantErr)
			}
			if strings.Contains(msg, "Secr3t") {
				t.Errorf("%s: ParseURL(%q) = %v: the password shows", p.name, raw, err)
			}
			// storeurl.Open refuses it for the same reason, before
			// connecting to anything.
			_, oerr := storeurl.Open(raw)
			ue, ok := errors.AsType[*storeurl.URLError](oerr)
			if !ok || !strings.Contains(msg, ue.Reason) || strings.Contains(oerr.Error(), "Secr3t") {
				t.Errorf("%s: storeurl.Open(%q) = %v, want a *URLError whose reason is ParseURL's (%v)", p.name, raw, oerr, err)
			}
		}
	}
}
