package e2e

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestSIGHUPReloadsWithWatcher: with hot reload on, SIGHUP asks the
// running watcher to reload, rather than stopping and restarting it.
// With a poll an hour away, a change is in force at SIGHUP, twice (the
// watcher still answers after the first). With polls every 300ms, SIGHUP
// of an unchanged file reloads it once, and the polls after it do not
// reload it again; a change written later is found by the polls.
func TestSIGHUPReloadsWithWatcher(t *testing.T) {
	domain := uniqueDomain("hupw")
	cfg := func(n int) string { return dayLimit(domain, n) }
	for _, interval := range []string{"1h", "300ms"} {
		t.Run(interval, func(t *testing.T) {
			p := start(t, cfg(2), "--reload-interval", interval)
			path := configPath(t, p)
			rls, _ := rlsClient(t, p.grpc)
			limitNow := func(value string) uint32 { t.Helper(); return currentLimit(t, p, rls, domain, value) }
			const reloaded = "configuration reloaded: 1 domain, 1 rule"
			waitLog := func(want string, n int) { t.Helper(); waitLogCount(t, p, want, n) }
			write := func(n int) {
				t.Helper()
				if err := os.WriteFile(path, []byte(cfg(n)), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			hup := func() {
				t.Helper()
				if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
					t.Fatal(err)
				}
			}
			if interval == "1h" {
				for i, n := range []int{7, 8} {
					write(n)
					hup()
					waitLog(reloaded, i+1)
					if got := limitNow(fmt.Sprint("a", i)); got != uint32(n) {
						t.Fatalf("limit %d after SIGHUP %d, want %d", got, i+1, n)
					}
				}
			} else {
				hup()
				waitLog(reloaded, 1)
				time.Sleep(time.Second) // three polls of a real process
				if n := strings.Count(p.logs(), reloaded); n != 1 {
					t.Fatalf("SIGHUP of an unchanged file, then 3 polls: %d reloads, want 1\n%s", n, p.logs())
				}
				write(7)
				waitLog(reloaded, 2)
				if got := limitNow("a"); got != 7 {
					t.Fatalf("limit %d after a change found by polling, want 7", got)
				}
			}
			if err := p.stop(syscall.SIGTERM, 15*time.Second); err != nil {
				t.Fatalf("SIGTERM: %v\n%s", err, p.logs())
			}
		})
	}
}
