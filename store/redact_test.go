package store_test

import (
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/redis"
	"github.com/floodgate/floodgate/store/storeurl"
)

// TestRedactURLHidesEveryPassword: whatever a password holds, RedactURL
// hides all of it, and neither the parsers' errors nor storeurl.Open's
// show any of it, for every scheme, in URLs that parse, that fail to
// parse and that name no reachable server. Every password starts with
// "Sup3r" and ends with "Secr3t" so that a partial leak shows too.
func TestRedactURLHidesEveryPassword(t *testing.T) {
	const sentinelWithoutMaster = "redis-sentinel://:PW@127.0.0.1:1"
	// written: the password as it appears in the URL; want: as the parser
	// reads it ("" when it must refuse it).
	passwords := []struct{ written, want string }{
		{"Sup3r-Secr3t", "Sup3r-Secr3t"},
		{"Sup3r/Secr3t", "Sup3r/Secr3t"},
		{"Sup3r?Secr3t", "Sup3r?Secr3t"},
		{"Sup3r#Secr3t", "Sup3r#Secr3t"},
		{"Sup3r@Secr3t", "Sup3r@Secr3t"},
		{"Sup3r:Secr3t", "Sup3r:Secr3t"},
		{"Sup3r@ss:w0rd%23Secr3t", "Sup3r@ss:w0rd#Secr3t"},
		{"Sup3r%2F%3F%23%40%3ASecr3t", "Sup3r/?#@:Secr3t"},
		{"Sup3r/@?#:%25Secr3t", "Sup3r/@?#:%Secr3t"},
		{"Sup3r%zzSecr3t", ""}, // a bad escape
	}
	// forms: URLs with PW for the password; ok: whether it parses.
	forms := []struct {
		url string
		ok  bool
	}{
		{"redis://:PW@127.0.0.1:1", true},
		{"redis://bob:PW@127.0.0.1:1/2", true},
		{"rediss://bob:PW@127.0.0.1:1", true},
		{"REDIS://:PW@127.0.0.1:1", true},
		{"redis-cluster://:PW@127.0.0.1:1,127.0.0.1:2", true},
		{"redis-sentinel://:PW@mymaster@127.0.0.1:1,127.0.0.1:2", true},
		{"redis-sentinel://bob:PW@mymaster@127.0.0.1:1/3", true},
		{"redis://:PW@127.0.0.1:99999", false},
		{"redis://bob:PW@127.0.0.1:1/x", false},
		{"redis://:PW@127.0.0.1:1?db=2", false},
		{"redis://:PW@127.0.0.1:1/0#frag", false},
		{"redis://:PW@a:1,b:2", false},
		{"redis-cluster://:PW@127.0.0.1", false},
		{"redis-cluster://:PW@127.0.0.1:1/0", false},
		{sentinelWithoutMaster, false},
		{"redis-sentinel://:PW@@127.0.0.1:1", false},
		{"memcached://:PW@127.0.0.1:1", false},
		{"memcached://bob:PW@127.0.0.1:1,127.0.0.1:2", false},
		{"memory://:PW@", false},
		{"redis:/:PW@127.0.0.1:1", false},
		{":PW@127.0.0.1:1", false},
	}
	leaks := func(s string, pw string) bool {
		for _, w := range []string{"Sup3r", "Secr3t", pw, url.PathEscape(pw), url.QueryEscape(pw)} {
			if w != "" && strings.Contains(s, w) {
				return true
			}
		}
		return false
	}
	for _, f := range forms {
		for _, p := range passwords {
			raw := strings.Replace(f.url, "PW", p.written, 1)
			if at := strings.LastIndexByte(p.written, '@'); f.url == sentinelWithoutMaster && at >= 0 && !strings.Contains(p.written[at:], ":") {
				// ":Sup3r@Secr3t@host" is a password and a master name:
				// what follows an '@' can always be read so.
				continue
			}
			if got := store.RedactURL(raw); leaks(got, p.want) {
				t.Errorf("RedactURL(%q) = %q: the password shows", raw, got)
			}
			if strings.HasPrefix(strings.ToLower(raw), "redis") && strings.Contains(raw, "://") {
				e, err := redis.ParseURL(raw)
				switch {
				case err != nil && leaks(err.Error(), p.want):
					t.Errorf("redis.ParseURL(%q) = %v: the password shows", raw, err)
				case err == nil && (!f.ok || p.want == ""):
					t.Errorf("redis.ParseURL(%q) = %+v, want an error", raw, e)
				case err != nil && f.ok && p.want != "":
					t.Errorf("redis.ParseURL(%q): %v", raw, err)
				case err == nil && e.Password != p.want:
					t.Errorf("redis.ParseURL(%q): password %q, want %q", raw, e.Password, p.want)
				case err == nil && e.Username != "" && e.Username != "bob":
					t.Errorf("redis.ParseURL(%q): user name %q, want bob", raw, e.Username)
				}
			}
			st, err := storeurl.Open(raw, storeurl.WithTimeout(100*time.Millisecond))
			if err == nil {
				st.Close()
				t.Errorf("storeurl.Open(%q) succeeded with nothing listening", raw)
				continue
			}
			if leaks(err.Error(), p.want) {
				t.Errorf("storeurl.Open(%q) = %v: the password shows", raw, err)
			}
		}
	}
}

func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"redis://127.0.0.1:6379/0":                  "redis://127.0.0.1:6379/0",
		"redis://bob@h:1":                           "redis://xxxxx@h:1", // no ":": perhaps a password (redis-cli reads it so)
		"redis://bob:pw@h:1/0":                      "redis://bob:xxxxx@h:1/0",
		"redis://:a/b?c#d@e:f@h:1/0":                "redis://:xxxxx@h:1/0",
		"rediss://bob:p%40w@h:1":                    "rediss://bob:xxxxx@h:1",
		"redis-cluster://:pw@a:1,b:2":               "redis-cluster://:xxxxx@a:1,b:2",
		"redis-sentinel://mymaster@a:1,b:2":         "redis-sentinel://mymaster@a:1,b:2",
		"redis-sentinel://:my@pw@mymaster@a:1":      "redis-sentinel://:xxxxx@mymaster@a:1",
		"redis-sentinel://bob:pw@mymaster@a:1/2":    "redis-sentinel://bob:xxxxx@mymaster@a:1/2",
		"redis-sentinel://bob:pw@a:1":               "redis-sentinel://bob:xxxxx@a:1",
		"memcached://a:1,b:2":                       "memcached://a:1,b:2",
		"memcached://secret@a:1":                    "memcached://xxxxx@a:1",
		"memcacheds://bob:secret@a:1":               "memcacheds://xxxxx@a:1",
		"memory://?max_keys=10":                     "memory://?max_keys=10",
		"http://admin:s3cret@127.0.0.1:1/":          "http://admin:xxxxx@127.0.0.1:1/",
		"redis:/bob:pw@h:1":                         "xxxxx@h:1",
		"localhost:6379":                            "localhost:6379",
		"redis://bob:pw@h:1?password=also@h2:2#x@y": "redis://bob:xxxxx@y",
	} {
		if got := store.RedactURL(in); got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", in, got, want)
		}
	}
}
