package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestValidateGatewayLines: floodgate validate prints every problem of a
// gateway section, each as file:line: message at the line of the field at
// fault (or of the entry lacking one), in file order, and exits 1.
func TestValidateGatewayLines(t *testing.T) {
	const dir = "../../gateway/testdata/lines/"
	for _, tc := range []struct {
		file string
		want []string
	}{
		{"generic_key_no_value.yaml", []string{
			"8: gateway: routes[0].descriptors[0].entries[1].value: generic_key needs a value",
		}},
		{"three.yaml", []string{
			`3: gateway: proxy_header: unknown proxy header "x-forwarded-fur" (want X-Forwarded-For, Forwarded or X-Real-IP)`,
			"4: gateway: ipv4_prefix: 33 is not in 1..32",
			"12: gateway: routes[0].descriptors[0].entries[1].value: generic_key needs a value",
		}},
	} {
		var out, errb bytes.Buffer
		code := run(context.Background(), []string{"validate", dir + tc.file}, &out, &errb)
		var want strings.Builder
		for _, w := range tc.want {
			want.WriteString(dir + tc.file + ":" + w + "\n")
		}
		if code != 1 || errb.String() != want.String() || out.Len() != 0 {
			t.Errorf("validate %s: exit %d, stdout %q, stderr:\n%s\nwant exit 1, stderr:\n%s", tc.file, code, out.String(), errb.String(), want.String())
		}
	}
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"validate", "--preserve-host", dir + "valid.yaml"}, &out, &errb); code != 0 {
		t.Errorf("validate valid.yaml: exit %d, stderr %s", code, errb.String())
	}
}
