package testserver

import (
	"bufio"
	"strconv"
	"strings"
	"testing"
)

func TestReadReply(t *testing.T) {
	for in, want := range map[string]string{
		"+OK\r\n":                        "OK",
		":42\r\n":                        "42",
		"$3\r\nfoo\r\n":                  "foo",
		"$-1\r\n":                        "<nil>",
		"*2\r\n$1\r\na\r\n:1\r\n":        "[a 1]",
		"*2\r\n-ERR x\r\n+y\r\n":         "[ERR x y]",
		"*1\r\n*1\r\n$0\r\n\r\n":         "[[]]",
		"*-1\r\n":                        "<nil>",
		"$5\r\na\r\nbc\r\n":              "a\r\nbc",
		"*3\r\n:1\r\n:2\r\n$2\r\nhi\r\n": "[1 2 hi]",
	} {
		v, err := readReply(bufio.NewReader(strings.NewReader(in)))
		if err != nil {
			t.Errorf("%q: %v", in, err)
			continue
		}
		if got := fmtAny(v); got != want {
			t.Errorf("%q: got %s, want %s", in, got, want)
		}
	}
	for _, in := range []string{"", "\r\n", "?x\r\n", "$9999999999\r\n", "*9999999999\r\n", "$3\r\nab", ":x\r\n", "+OK\n"} {
		if _, err := readReply(bufio.NewReader(strings.NewReader(in))); err == nil {
			t.Errorf("%q: no error", in)
		}
	}
	if _, err := readReply(bufio.NewReader(strings.NewReader("-ERR bad\r\n"))); err == nil || err.Error() != "ERR bad" {
		t.Errorf("error reply: %v", err)
	}
}

func fmtAny(v any) string {
	switch v := v.(type) {
	case nil:
		return "<nil>"
	case []any:
		parts := make([]string, len(v))
		for i, e := range v {
			parts[i] = fmtAny(e)
		}
		return "[" + strings.Join(parts, " ") + "]"
	case RedisError:
		return string(v)
	case string:
		return v
	case int64:
		return strconv.FormatInt(v, 10)
	}
	return "?"
}

// FuzzReadReply checks that no input makes the RESP reader panic or allocate without bound.
func FuzzReadReply(f *testing.F) {
	for _, s := range []string{"+OK\r\n", "$3\r\nfoo\r\n", "*2\r\n:1\r\n-ERR\r\n", "*1\r\n*1\r\n*0\r\n", "$-1\r\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		readReply(bufio.NewReader(strings.NewReader(string(data))))
	})
}

// FuzzParseClusterNodes checks that no CLUSTER NODES text makes the parser panic.
func FuzzParseClusterNodes(f *testing.F) {
	f.Add("e7d1 127.0.0.1:30001@31001 myself,master - 0 0 1 connected 0-5460 [5461->-67ed]\n")
	f.Add("07c3 127.0.0.1:30004@31004,host slave e7d1 0 1426238317239 4 connected\n")
	f.Fuzz(func(t *testing.T, text string) {
		nodes, err := ParseClusterNodes(text)
		if err != nil {
			return
		}
		for _, n := range nodes {
			n.SlotCount()
			n.ServesSlot(100)
			n.Failing()
		}
	})
}
