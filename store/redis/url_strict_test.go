package redis

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/testserver"
)

// TestParseURLNormalises: ports and database numbers are decimal digits,
// leading zeros dropped.
func TestParseURLNormalises(t *testing.T) {
	for _, tc := range []struct {
		url   string
		addrs []string
		db    int
	}{
		{"redis://127.0.0.1:027000", []string{"127.0.0.1:27000"}, 0},
		{"redis://h:06379/00", []string{"h:6379"}, 0},
		{"redis://h:1/007", []string{"h:1"}, 7},
		{"redis-cluster://a:07000,b:7001", []string{"a:7000", "b:7001"}, 0},
		{"redis-sentinel://m@a:026379/2", []string{"a:26379"}, 2},
	} {
		e, err := ParseURL(tc.url)
		if err != nil {
			t.Errorf("ParseURL(%q): %v", tc.url, err)
			continue
		}
		if !slices.Equal(e.Addrs, tc.addrs) || e.DB != tc.db {
			t.Errorf("ParseURL(%q) = %v db %d, want %v db %d", tc.url, e.Addrs, e.DB, tc.addrs, tc.db)
		}
	}
}

// TestParseURLRefusesOddNumbers: a sign, a space or a host with a space
// used to be taken (+27000 passed on as written, /+1 read as db 1), and a
// '+' in a query value was reported as a space.
func TestParseURLRefusesOddNumbers(t *testing.T) {
	for _, tc := range []struct{ url, want string }{
		{"redis://127.0.0.1:+27000", `port must be 1-65535, got "+27000"`},
		{"redis://h:-1", `got "-1"`},
		{"redis://h: 1", `got " 1"`},
		{"redis://h:1/+1", `database must be a non-negative integer in decimal digits (no sign), got "+1"`},
		{"redis://h:1/-0", `got "-0"`},
		{"redis://h:1/ 1", `got " 1"`},
		{"redis://h:1/99999999999", `got "99999999999"`},
		{"redis://host with space:6379", "the host holds a space"},
		{"redis-cluster://a:1,b\t:2", "the host holds a space"},
		{"redis://h:1?wait_replicas=+1", `wait_replicas="+1"`},
		{"redis://h:1?wait_replicas=%2B1", `wait_replicas="%2B1"`},
		{"redis://h:1?wait_replicas=1&wait_timeout=+50ms", `wait_timeout="+50ms"`},
		{"redis://h:1?wait_replicas=1&wait_replicas=2", `"wait_replicas" given 2 times`},
	} {
		_, err := ParseURL(tc.url)
		if err == nil || !errors.Is(err, ErrBadURL) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseURL(%q) = %v, want an ErrBadURL saying %s", tc.url, err, tc.want)
		}
	}
}

// TestURLErrorsHideLoneUserInfo: redis://secret@host (a user name to
// floodgate, rueidis and go-redis, a password to redis-cli) never shows
// in errors; it did in Open's (WRONGPASS).
func TestURLErrorsHideLoneUserInfo(t *testing.T) {
	for _, tc := range []struct{ url, shown string }{
		{"redis://hunter2@h:0", `"redis://xxxxx@h:0"`},
		{"rediss://hunter2@h:1/x", `"rediss://xxxxx@h:1/x"`},
		{"redis-sentinel://hunter2@mymaster@a:0", `"redis-sentinel://xxxxx@mymaster@a:0"`},
		{"redis-cluster://hunter2@a:1/2", `"redis-cluster://xxxxx@a:1/2"`},
		{"redis://hunter2%zz@h:1", `"redis://xxxxx@h:1"`},
		{"redis://bob:hunter2@h:0", `"redis://bob:xxxxx@h:0"`},
	} {
		_, err := ParseURL(tc.url)
		if err == nil || strings.Contains(err.Error(), "hunter2") || !strings.Contains(err.Error(), tc.shown) {
			t.Errorf("ParseURL(%q) = %v, want an error showing %s", tc.url, err, tc.shown)
		}
	}
	// No such user: WRONGPASS.
	addr := testserver.Redis(t)
	_, err := Open("redis://hunter2@"+addr, WithTimeout(2*time.Second))
	if err == nil || strings.Contains(err.Error(), "hunter2") || !strings.Contains(err.Error(), "redis://xxxxx@"+addr) {
		t.Errorf("Open with a wrong lone user info: %v, want an error showing redis://xxxxx@%s", err, addr)
	}
}

// TestOpenDBOutOfRange: a database number the server does not have is a
// bad URL naming the server's databases setting; it was an outage
// (store: unavailable: DB index is out of range).
func TestOpenDBOutOfRange(t *testing.T) {
	srv := testserver.NewRedis(t, "--databases", "4")
	if srv == nil {
		t.Skip("no redis-server")
	}
	_, err := Open("redis://"+srv.Addr+"/4", WithTimeout(2*time.Second))
	if err == nil || !errors.Is(err, ErrBadURL) || !strings.Contains(err.Error(), "database 4 does not exist") ||
		!strings.Contains(err.Error(), "databases setting is 4: 0 to 3") {
		t.Errorf("Open(/4) on a server of 4 databases: %v, want an ErrBadURL naming database 4 and the setting", err)
	}
	s := openT(t, "redis://"+srv.Addr+"/3", WithTimeout(2*time.Second))
	_ = s
}
