package memcached

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"
)

// A multi-key Take (batch.go) must not cost a round trip per key: with a
// thousand descriptors that outlasts any store timeout, and the failure
// policy then answers (fail open: admits). gomemcache sends one command
// and waits for its answer, so a batch goes through pipes instead: one
// pool of connections per server, the store's own checkedConns (same
// dialer, same check of a connection the server closed), on which all of
// a step's commands for that server are written at once and their replies
// read in order. The servers of a step run concurrently, so a step is one
// round trip per server whatever the number of keys.

// pcmd is one command of a pipelined step and, once run, its reply.
type pcmd struct {
	verb  byte   // cmdIncr, cmdDecr, cmdAdd, cmdCAS or cmdGets
	srv   int    // the server's index
	key   string // the memcached key
	delta uint64 // incr, decr
	value []byte // add, cas
	exp   int32  // add, cas
	casID uint64 // cas

	// The reply.
	res   reply
	n     uint64 // incr, decr: the new value
	val   []byte // gets: the value (a copy)
	gotID uint64 // gets: the CAS id
	err   error  // the server refused this command (SERVER_ERROR, CLIENT_ERROR), or its server failed
}

const (
	cmdIncr byte = 'i'
	cmdDecr byte = 'd'
	cmdAdd  byte = 'a'
	cmdCAS  byte = 'c'
	cmdGets byte = 'g'
)

// reply is a command's outcome when err is nil.
type reply uint8

const (
	rOK        reply = iota // STORED, a number, or a gets that found the item
	rMiss                   // NOT_FOUND, or a gets that found nothing
	rNotStored              // add: NOT_STORED
	rExists                 // cas: EXISTS
)

// pipePool is the connections of one server used by pipes.
type pipePool struct {
	addr    string
	dial    func(ctx context.Context, network, address string) (*checkedConn, error)
	timeout time.Duration
	maxIdle int

	mu     sync.Mutex
	idle   []*pipeConn
	closed bool
}

// pipeConn is a pooled connection with its reader and request buffer.
type pipeConn struct {
	c    *checkedConn
	r    *bufio.Reader
	buf  []byte
	ends []int // over TLS: where each command of buf ends
}

// connReader reads from a checkedConn's current socket (begin may have
// replaced it) without going through checkedConn.Read, which a pipe's
// writer goroutine would race with.
type connReader struct{ c *checkedConn }

func (r connReader) Read(b []byte) (int, error) { return r.c.Conn.Read(b) }

func (p *pipePool) get() (*pipeConn, error) {
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		pc := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		return pc, nil
	}
	p.mu.Unlock()
	c, err := p.dial(context.Background(), "tcp", p.addr)
	if err != nil {
		return nil, err
	}
	return &pipeConn{c: c, r: bufio.NewReaderSize(connReader{c}, 16<<10)}, nil
}

func (p *pipePool) put(pc *pipeConn) {
	if cap(pc.buf) > 1<<20 {
		pc.buf = nil // do not keep a huge batch's buffer
	}
	p.mu.Lock()
	if !p.closed && len(p.idle) < p.maxIdle {
		p.idle = append(p.idle, pc)
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	pc.c.Close()
}

func (p *pipePool) close() {
	p.mu.Lock()
	idle := p.idle
	p.idle, p.closed = nil, true
	p.mu.Unlock()
	for _, pc := range idle {
		pc.c.Close()
	}
}

// run sends cmds, all for this pool's server, in one write and reads their
// replies: one round trip. The commands are written by another goroutine
// while the replies are read, so that neither side's socket buffers can
// fill and stall the other however large the batch. A failure of the
// connection (or a reply out of protocol) fails every command not yet
// answered with the error, which run also returns; a command the server
// refused on its own (SERVER_ERROR) has its err set and the others go on.
func (p *pipePool) run(cmds []*pcmd) error {
	pc, err := p.get()
	if err != nil {
		err = fmt.Errorf("memcached: server %s: %w", p.addr, err)
		for _, c := range cmds {
			c.err = err
		}
		return err
	}
	pc.c.SetDeadline(time.Now().Add(p.timeout))
	pc.c.begin()
	nc := pc.c.Conn
	_, isTLS := nc.(*tls.Conn)
	b, ends := pc.buf[:0], pc.ends[:0]
	for _, c := range cmds {
		b = appendCmd(b, c)
		if isTLS {
			ends = append(ends, len(b))
		}
	}
	pc.buf, pc.ends = b, ends
	werr := make(chan error, 1)
	go func() { werr <- writeCmds(nc, b, ends) }()
	pc.r.Reset(connReader{pc.c})
	failed := -1
	for i, c := range cmds {
		if err = readReply(pc.r, c); err != nil {
			failed = i
			break
		}
	}
	if failed >= 0 {
		select {
		case werr := <-werr:
			if werr != nil {
				err = werr // the write failed first: the cause
			}
			pc.c.Close()
		default:
			pc.c.Close() // unblocks the writer
			<-werr
		}
		err = fmt.Errorf("memcached: server %s: %w", p.addr, err)
		for _, c := range cmds[failed:] {
			c.err = err
		}
		return err
	}
	if err := <-werr; err != nil { // every reply came: cannot happen
		pc.c.Close()
		return fmt.Errorf("memcached: server %s: %w", p.addr, err)
	}
	p.put(pc)
	return nil
}

// writeCmds writes b, the commands of a step, in one write; over TLS
// (ends not empty), one write per command, each ending at ends[i], so that no
// TLS record holds the end of one command and the start of the next.
// memcached 1.6.18 with TLS stalls on such a record: it reads a storage
// command's value with an SSL_read of the value's length, OpenSSL keeps
// the rest of the record decrypted in its own buffer, and memcached then
// waits for its socket to be readable, which it never is again once the
// whole step was sent. Measured: 44 of 60 add commands of 270 bytes
// answered in one write, the others only at the timeout (the step failed);
// all of them, up to 200 commands of 40 kB, one command a write.
func writeCmds(nc net.Conn, b []byte, ends []int) error {
	if len(ends) == 0 {
		_, err := nc.Write(b)
		return err
	}
	start := 0
	for _, end := range ends {
		if _, err := nc.Write(b[start:end]); err != nil {
			return err
		}
		start = end
	}
	return nil
}

// isConnErr reports an error of a command's connection rather than the
// server's refusal of the command itself.
func isConnErr(err error) bool {
	return !strings.HasPrefix(err.Error(), "memcache: server error: ")
}

func appendCmd(b []byte, c *pcmd) []byte {
	switch c.verb {
	case cmdIncr, cmdDecr:
		if c.verb == cmdIncr {
			b = append(b, "incr "...)
		} else {
			b = append(b, "decr "...)
		}
		b = append(b, c.key...)
		b = append(b, ' ')
		b = strconv.AppendUint(b, c.delta, 10)
	case cmdAdd, cmdCAS:
		if c.verb == cmdAdd {
			b = append(b, "add "...)
		} else {
			b = append(b, "cas "...)
		}
		b = append(b, c.key...)
		b = append(b, " 0 "...)
		b = strconv.AppendInt(b, int64(c.exp), 10)
		b = append(b, ' ')
		b = strconv.AppendInt(b, int64(len(c.value)), 10)
		if c.verb == cmdCAS {
			b = append(b, ' ')
			b = strconv.AppendUint(b, c.casID, 10)
		}
		b = append(b, "\r\n"...)
		b = append(b, c.value...)
	case cmdGets:
		b = append(b, "gets "...)
		b = append(b, c.key...)
	}
	return append(b, "\r\n"...)
}

var (
	lineStored    = []byte("STORED\r\n")
	lineNotStored = []byte("NOT_STORED\r\n")
	lineExists    = []byte("EXISTS\r\n")
	lineNotFound  = []byte("NOT_FOUND\r\n")
	lineEnd       = []byte("END\r\n")
	prefixValue   = []byte("VALUE ")
)

// readReply reads c's reply. It returns an error only when the connection
// cannot be used any further; a command the server refused on its own
// gets c.err and nil is returned.
func readReply(r *bufio.Reader, c *pcmd) error {
	line, err := r.ReadSlice('\n')
	if err != nil {
		return err
	}
	if refused, outOfStep := serverErr(line, c); refused {
		if outOfStep {
			return c.err
		}
		return nil
	}
	switch c.verb {
	case cmdIncr, cmdDecr:
		if bytes.Equal(line, lineNotFound) {
			c.res = rMiss
			return nil
		}
		n, err := strconv.ParseUint(string(bytes.TrimRight(line, "\r\n")), 10, 64)
		if err != nil {
			return fmt.Errorf("memcached: unexpected reply %q to %s", line, verbName(c.verb))
		}
		c.res, c.n = rOK, n
		return nil
	case cmdAdd, cmdCAS:
		switch {
		case bytes.Equal(line, lineStored):
			c.res = rOK
		case bytes.Equal(line, lineNotStored):
			c.res = rNotStored
		case bytes.Equal(line, lineExists):
			c.res = rExists
		case bytes.Equal(line, lineNotFound):
			c.res = rMiss
		default:
			return fmt.Errorf("memcached: unexpected reply %q to %s", line, verbName(c.verb))
		}
		return nil
	}
	// gets
	if bytes.Equal(line, lineEnd) {
		c.res = rMiss
		return nil
	}
	if !bytes.HasPrefix(line, prefixValue) {
		return fmt.Errorf("memcached: unexpected reply %q to gets", line)
	}
	// VALUE <key> <flags> <bytes> <cas>\r\n
	f := bytes.Fields(line[len(prefixValue):])
	if len(f) != 4 {
		return fmt.Errorf("memcached: unexpected reply %q to gets", line)
	}
	size, err1 := strconv.Atoi(string(f[2]))
	id, err2 := strconv.ParseUint(string(f[3]), 10, 64)
	if err1 != nil || err2 != nil || size < 0 {
		return fmt.Errorf("memcached: unexpected reply %q to gets", line)
	}
	val := make([]byte, size+2)
	if _, err := readFull(r, val); err != nil {
		return err
	}
	if !bytes.HasSuffix(val, []byte("\r\n")) {
		return errors.New("memcached: corrupt gets reply")
	}
	if line, err = r.ReadSlice('\n'); err != nil {
		return err
	}
	if !bytes.Equal(line, lineEnd) {
		return fmt.Errorf("memcached: unexpected reply %q after a gets value", line)
	}
	c.res, c.val, c.gotID = rOK, val[:size], id
	return nil
}

// serverErr sets c.err when line is the server's refusal of c, in the
// words gomemcache uses (unavailable and isTooLarge read them). outOfStep
// reports a refusal after which the server may take a storage command's
// data for a command: the connection cannot go on.
func serverErr(line []byte, c *pcmd) (refused, outOfStep bool) {
	msg := string(bytes.TrimRight(line, "\r\n"))
	storage := c.verb == cmdAdd || c.verb == cmdCAS
	switch {
	case bytes.HasPrefix(line, []byte("SERVER_ERROR ")):
		c.err = fmt.Errorf("memcache: server error: %s", msg[len("SERVER_ERROR "):])
		return true, false
	case bytes.HasPrefix(line, []byte("CLIENT_ERROR ")):
		c.err = fmt.Errorf("memcache: client error: %s", msg[len("CLIENT_ERROR "):])
		return true, storage
	case bytes.Equal(line, []byte("ERROR\r\n")):
		c.err = fmt.Errorf("memcached: the server does not know %s", verbName(c.verb))
		return true, true
	}
	return false, false
}

func verbName(v byte) string {
	switch v {
	case cmdIncr:
		return "incr"
	case cmdDecr:
		return "decr"
	case cmdAdd:
		return "add"
	case cmdCAS:
		return "cas"
	}
	return "gets"
}

func readFull(r *bufio.Reader, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		m, err := r.Read(b[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}
