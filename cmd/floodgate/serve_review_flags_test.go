package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// A boolean flag's value written apart (--shadow false, common in
// Kubernetes args lists) ends the flags: serve said only `unexpected
// argument "false"`. It now says to write --shadow=false.
func TestBoolFlagWithASeparateValue(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--shadow", "false"}, `floodgate serve: unexpected argument "false" after the boolean flag --shadow, which takes no separate value (alone it means true): write --shadow=false`},
		{[]string{"serve", "--envoy-headers", "true"}, `write --envoy-headers=true`},
		{[]string{"serve", "-start-degraded", "0"}, `write -start-degraded=0`},
	} {
		var out, errb bytes.Buffer
		if code := run(context.Background(), c.args, &out, &errb); code != 2 || !strings.Contains(errb.String(), c.want) {
			t.Errorf("%q: exit %d, stderr %q; want 2 and %q", c.args, code, errb.String(), c.want)
		}
	}
	// Not a boolean's value: no hint.
	var out, errb bytes.Buffer
	run(context.Background(), []string{"serve", "--shadow", "extra"}, &out, &errb)
	if strings.Contains(errb.String(), "boolean") {
		t.Errorf("--shadow extra: %q, want no boolean hint", errb.String())
	}
}
