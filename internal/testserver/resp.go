package testserver

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// RedisError is an error reply ("-ERR ...") from a Redis server.
type RedisError string

func (e RedisError) Error() string { return string(e) }

// RESPConn is a minimal RESP2 client connection, enough for the package's own readiness and
// topology checks and for tests that need to poke a server without a client library.
// It is not safe for concurrent use.
type RESPConn struct {
	conn    net.Conn
	r       *bufio.Reader
	timeout time.Duration
}

// DialRESP connects to a Redis server (or sentinel). timeout bounds the dial and every
// later Do call.
func DialRESP(addr string, timeout time.Duration) (*RESPConn, error) {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, err
	}
	return &RESPConn{conn: c, r: bufio.NewReader(c), timeout: timeout}, nil
}

// Close closes the connection.
func (c *RESPConn) Close() error { return c.conn.Close() }

// Do sends one command and reads its reply. Replies are decoded as:
// simple string and bulk string -> string, integer -> int64, array -> []any,
// null bulk/array -> nil, error reply -> a RedisError returned as the error.
func (c *RESPConn) Do(args ...string) (any, error) {
	if len(args) == 0 {
		return nil, errors.New("testserver: empty command")
	}
	if c.timeout > 0 {
		if err := c.conn.SetDeadline(time.Now().Add(c.timeout)); err != nil {
			return nil, err
		}
	}
	buf := make([]byte, 0, 64)
	buf = append(buf, '*')
	buf = strconv.AppendInt(buf, int64(len(args)), 10)
	buf = append(buf, '\r', '\n')
	for _, a := range args {
		buf = append(buf, '$')
		buf = strconv.AppendInt(buf, int64(len(a)), 10)
		buf = append(buf, '\r', '\n')
		buf = append(buf, a...)
		buf = append(buf, '\r', '\n')
	}
	if _, err := c.conn.Write(buf); err != nil {
		return nil, err
	}
	return readReply(c.r)
}

func readLine(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	if len(line) < 2 || line[len(line)-2] != '\r' {
		return "", fmt.Errorf("testserver: malformed RESP line %q", line)
	}
	return line[:len(line)-2], nil
}

// Limits on announced lengths, so that a corrupt reply cannot make us allocate gigabytes.
const (
	maxBulk  = 512 << 20 // Redis' proto-max-bulk-len default
	maxArray = 1 << 20
	maxDepth = 16
)

func readReply(r *bufio.Reader) (any, error) { return readReplyDepth(r, 0) }

func readReplyDepth(r *bufio.Reader, depth int) (any, error) {
	if depth > maxDepth {
		return nil, errors.New("testserver: RESP reply nested too deeply")
	}
	line, err := readLine(r)
	if err != nil {
		return nil, err
	}
	if line == "" {
		return nil, errors.New("testserver: empty RESP line")
	}
	body := line[1:]
	switch line[0] {
	case '+':
		return body, nil
	case '-':
		return nil, RedisError(body)
	case ':':
		return strconv.ParseInt(body, 10, 64)
	case '$':
		n, err := strconv.Atoi(body)
		if err != nil || n > maxBulk {
			return nil, fmt.Errorf("testserver: bad bulk length %q", body)
		}
		if n < 0 {
			return nil, nil
		}
		b := make([]byte, n+2)
		if _, err := io.ReadFull(r, b); err != nil {
			return nil, err
		}
		return string(b[:n]), nil
	case '*':
		n, err := strconv.Atoi(body)
		if err != nil || n > maxArray {
			return nil, fmt.Errorf("testserver: bad array length %q", body)
		}
		if n < 0 {
			return nil, nil
		}
		out := make([]any, n)
		for i := range out {
			v, err := readReplyDepth(r, depth+1)
			// An error element inside an array (e.g. in EXEC) is kept as a value.
			var re RedisError
			if errors.As(err, &re) {
				out[i] = re
				continue
			}
			if err != nil {
				return nil, err
			}
			out[i] = v
		}
		return out, nil
	default:
		return nil, fmt.Errorf("testserver: unexpected RESP reply %q", line)
	}
}

// RedisDo opens a connection to addr, runs one command and closes the connection.
// The whole exchange is bounded by timeout.
func RedisDo(addr string, timeout time.Duration, args ...string) (any, error) {
	c, err := DialRESP(addr, timeout)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.Do(args...)
}

// redisString runs a command whose reply is a string.
func redisString(addr string, timeout time.Duration, args ...string) (string, error) {
	v, err := RedisDo(addr, timeout, args...)
	if err != nil {
		return "", err
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("testserver: %v: unexpected reply %#v", args, v)
	}
	return s, nil
}

// pingRedis sends PING and expects PONG.
func pingRedis(addr string, timeout time.Duration) error {
	s, err := redisString(addr, timeout, "PING")
	if err != nil {
		return err
	}
	if s != "PONG" {
		return fmt.Errorf("testserver: PING %s: got %q", addr, s)
	}
	return nil
}

// pingMemcached sends "version" and expects "VERSION ...".
func pingMemcached(addr string, timeout time.Duration) error {
	return pingMemcachedOver(addr, "", timeout, func() (net.Conn, error) { return net.DialTimeout("tcp", addr, timeout) })
}

// pingMemcachedOver is pingMemcached on the connection dial opens; how
// ("" or " over TLS") is said in the error of an unexpected reply.
func pingMemcachedOver(addr, how string, timeout time.Duration, dial func() (net.Conn, error)) error {
	c, err := dial()
	if err != nil {
		return err
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(timeout)); err != nil {
		return err
	}
	if _, err := io.WriteString(c, "version\r\n"); err != nil {
		return err
	}
	line, err := readLine(bufio.NewReader(c))
	if err != nil {
		return err
	}
	if len(line) < 8 || line[:8] != "VERSION " {
		return fmt.Errorf("testserver: memcached %s: unexpected reply%s %q", addr, how, line)
	}
	return nil
}

// infoField returns the value of field in an INFO reply ("field:value" lines).
func infoField(info, field string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSuffix(line, "\r"), field+":"); ok {
			return v
		}
	}
	return ""
}
