package policy

import "testing"

// A tab in a line's indentation gave yaml.v3's bare "found character that
// cannot start any token", which does not say what to change. The error
// keeps its file:line and adds the cause; a tab elsewhere in a line, or an
// error on a line indented with spaces, gets no hint.
func TestTabIndentHint(t *testing.T) {
	for _, tc := range []struct{ name, data, want string }{
		{"a tab first", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n\t  unit: second\n      requests_per_unit: 5\n",
			"c.yaml:5: YAML syntax error: found character that cannot start any token (line 5 is indented with a tab; YAML indents with spaces)"},
		{"a tab after spaces", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n   \t unit: second\n      requests_per_unit: 5\n",
			"c.yaml:5: YAML syntax error: found character that cannot start any token (line 5 is indented with a tab; YAML indents with spaces)"},
		{"a tab before a sequence entry's key", "domain: d\ndescriptors:\n  - key: k\n\trate_limit:\n      unit: second\n      requests_per_unit: 5\n",
			"c.yaml:4: YAML syntax error: found a tab character that violates indentation (line 4 is indented with a tab; YAML indents with spaces)"},
		{"no tab", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second\n",
			"c.yaml:4: YAML syntax error: did not find expected ',' or '}'"},
		// A tab is allowed before a flow mapping's continued line ({...}
		// over two lines loads with it); the error is the missing }, and
		// spaces in place of the tab would not fix it.
		{"a flow mapping's tab-indented line, its } missing", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second,\n\trequests_per_unit: 5\n",
			"c.yaml:5: YAML syntax error: did not find expected ',' or '}'"},
		{"CRLF", "domain: d\r\ndescriptors:\r\n  - key: k\r\n    rate_limit:\r\n\t\tunit: second\r\n",
			"c.yaml:5: YAML syntax error: found character that cannot start any token (line 5 is indented with a tab; YAML indents with spaces)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("c.yaml", []byte(tc.data))
			if err == nil || err.Error() != tc.want {
				t.Errorf("Parse: %v\nwant %s", err, tc.want)
			}
		})
	}
	for _, tc := range []struct {
		data string
		line int
		want bool
	}{
		{"a: 1\n\tb: 2\n", 2, true},
		{"a: 1\n  \tb: 2\n", 2, true},
		{"a:\t1\n", 1, false},
		{"a: 1\n", 2, false},
		{"a: 1\n", 7, false},
		{"\t", 1, true},
	} {
		if got := indentedWithTab([]byte(tc.data), tc.line); got != tc.want {
			t.Errorf("indentedWithTab(%q, %d) = %v, want %v", tc.data, tc.line, got, tc.want)
		}
	}
}
