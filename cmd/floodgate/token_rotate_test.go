package main

import (
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestServeTokenFilesRereadOnSIGHUP: a token file rewritten (a rotated
// Secret) takes effect at the next SIGHUP: the new admin token is taken,
// the old one refused, /v1/observe (no observe token of its own) follows
// the admin token; a file emptied by mistake leaves the tokens in force,
// with a WARN. Before, the files were read once at start and a rotation
// took a restart.
func TestServeTokenFilesRereadOnSIGHUP(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "admin-token")
	if err := os.WriteFile(file, []byte("old-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, errb, stop := startServe(t, "--reload-interval", "0", "--admin-token-file", file)
	defer func() {
		if code := stop(); code != 0 {
			t.Errorf("exit %d after cancel: %s", code, errb.String())
		}
	}()
	httpAddr, _, adminAddr := serveAddrs(t, out.String())
	config := func(tok string) int {
		t.Helper()
		req, _ := http.NewRequest("GET", "http://"+adminAddr+"/admin/api/config", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if a, b := config("old-token"), config("new-token"); a != 200 || b != 401 {
		t.Fatalf("before the rotation: old token %d, new %d; want 200 and 401", a, b)
	}
	hup := func() {
		t.Helper()
		if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(file, []byte("new-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	hup()
	waitLog(t, errb, "SIGHUP: token files reread")
	if a, b := config("old-token"), config("new-token"); a != 401 || b != 200 {
		t.Errorf("after the rotation and SIGHUP: old token %d, new %d; want 401 and 200", a, b)
	}
	// The example configuration has no rule edge/per-user: past the token,
	// the sample is a 404 naming the rule.
	if code, body := observe(t, "http://"+httpAddr+"/v1/observe", "new-token"); code == 401 || code == 403 {
		t.Errorf("/v1/observe with the new admin token: %d %s, want it past the token check", code, body)
	}
	if code, body := observe(t, "http://"+httpAddr+"/v1/observe", "old-token"); code != 401 {
		t.Errorf("/v1/observe with the old admin token: %d %s, want 401", code, body)
	}
	if err := os.WriteFile(file, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	hup()
	waitLog(t, errb, "SIGHUP: token files not reread, the tokens in force stay")
	if code := config("new-token"); code != 200 {
		t.Errorf("after an emptied file and SIGHUP: new token %d, want 200 (kept)", code)
	}
}
