package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/server"
)

// GET /admin/api/config says when the configuration on disk failed to
// reload (last_reload: its time, ok false and the problems), so that an
// operator reading it sees that the file is not what is loaded; it showed
// the configuration in force and nothing else.
func TestServeConfigShowsAFailedReload(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "api.yaml")
	good := "domain: api\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 10}\n"
	if err := os.WriteFile(file, []byte(good), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errb, stop := startServe(t, "--config", dir, "--reload-interval", "100ms")
	defer stop()
	_, _, admin := serveAddrs(t, out.String())
	config := func() server.ConfigView {
		t.Helper()
		resp, err := http.Get("http://" + admin + "/admin/api/config")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var v server.ConfigView
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatalf("/admin/api/config: %v: %s", err, b)
		}
		return v
	}
	if v := config(); v.LastReload != nil {
		t.Fatalf("last_reload before any reload: %+v, want none", v.LastReload)
	}
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; !strings.Contains(errb.String(), "configuration not reloaded"); i++ {
		if time.Now().After(deadline) {
			t.Fatalf("no reload failure logged within 10s: %s", errb.String())
		}
		if err := os.WriteFile(file, []byte(fmt.Sprintf("%s    burst: -1 # %d\n", good, i)), 0o644); err != nil {
			t.Fatal(err)
		}
		time.Sleep(300 * time.Millisecond) // two polls of 100 ms find the file alike: a change is loaded once it stays
	}
	v := config()
	if lr := v.LastReload; lr == nil || lr.OK || len(lr.Problems) == 0 || !strings.Contains(lr.Problems[0], "api.yaml:") ||
		time.Since(lr.Time) > time.Minute {
		t.Fatalf("last_reload after a failed reload: %+v, want ok false, its time and the problems (file:line)", lr)
	}
	if err := os.WriteFile(file, []byte(good+"# fixed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		if lr := config().LastReload; lr != nil && lr.OK && len(lr.Problems) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("last_reload not ok 10s after the file was fixed: %+v", config().LastReload)
		}
		time.Sleep(50 * time.Millisecond) // waiting for the watcher
	}
}
