package server_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/policy"
	"github.com/floodgate/floodgate/server"
	"github.com/floodgate/floodgate/store/redis"
)

// TestAdminKeysOnlyUnderThePrefix: on a Redis shared with another
// application, /admin/api/keys/{key} reaches only Floodgate's keys (the
// engine's key prefix). Before, DELETE /admin/api/keys/session:alice
// deleted the other application's session and GET told its type.
func TestAdminKeysOnlyUnderThePrefix(t *testing.T) {
	addr := testserver.Redis(t)
	if addr == "" {
		return
	}
	st, err := redis.Open("redis://" + addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	cfg, err := policy.Parse("test.yaml", []byte(`
domain: api
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 10}
`))
	if err != nil {
		t.Fatal(err)
	}
	run := fmt.Sprint(time.Now().UnixNano())
	eng, err := policy.NewEngine(cfg, st, policy.WithKeyPrefix("fg"+run+":"))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(eng, st)
	if err != nil {
		t.Fatal(err)
	}
	admin := httptest.NewServer(srv.AdminHandler())
	defer admin.Close()

	c := st.Client()
	foreign := "session:alice:" + run
	if err := c.Do(t.Context(), c.B().Set().Key(foreign).Value("cookie").Px(time.Minute).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	for _, method := range []string{"GET", "DELETE"} {
		code, body, _ := do(t, method, admin.URL+"/admin/api/keys/"+url.PathEscape(foreign), "", nil)
		if code != http.StatusBadRequest || !strings.Contains(string(body), "not a Floodgate key") || !strings.Contains(string(body), "fg"+run+":") {
			t.Errorf("%s %s: %d %s, want 400 naming the key prefix", method, foreign, code, body)
		}
	}
	if v, err := c.Do(t.Context(), c.B().Get().Key(foreign).Build()).ToString(); err != nil || v != "cookie" {
		t.Errorf("the other application's key after the admin calls: %q, %v; want it untouched", v, err)
	}

	// Floodgate's own keys are still reached.
	if _, err := eng.Decide(t.Context(), policy.Request{Domain: "api", Descriptors: []policy.Descriptor{{Entries: []policy.Entry{{Key: "user", Value: "u1"}}}}}); err != nil {
		t.Fatal(err)
	}
	keys, err := c.Do(t.Context(), c.B().Keys().Pattern("fg"+run+":*").Build()).AsStrSlice()
	if err != nil || len(keys) != 1 {
		t.Fatalf("Floodgate's keys: %v, %v; want one", keys, err)
	}
	if code, body, _ := do(t, "GET", admin.URL+"/admin/api/keys/"+url.PathEscape(keys[0]), "", nil); code != http.StatusOK {
		t.Errorf("GET %s: %d %s, want 200", keys[0], code, body)
	}
	if code, body, _ := do(t, "DELETE", admin.URL+"/admin/api/keys/"+url.PathEscape(keys[0]), "", nil); code != http.StatusNoContent {
		t.Errorf("DELETE %s: %d %s, want 204", keys[0], code, body)
	}
}
