package server_test

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/floodgate/floodgate/server"
	"github.com/floodgate/floodgate/store/memory"
)

// HTTP/2 frame types and codes the stream flood test reads and writes
// (RFC 9113); the test speaks HTTP/2 by hand, as a hostile client would.
const (
	h2Headers      = 0x1
	h2RSTStream    = 0x3
	h2Settings     = 0x4
	h2GoAway       = 0x7
	h2EndHeaders   = 0x4
	h2Ack          = 0x1
	h2MaxStreams   = 0x3 // SETTINGS_MAX_CONCURRENT_STREAMS
	h2RefusedCode  = 0x7 // REFUSED_STREAM
	h2FrameHdrSize = 9
)

func writeFrame(w io.Writer, typ, flags byte, stream uint32, payload []byte) error {
	var h [h2FrameHdrSize]byte
	h[0], h[1], h[2] = byte(len(payload)>>16), byte(len(payload)>>8), byte(len(payload))
	h[3], h[4] = typ, flags
	binary.BigEndian.PutUint32(h[5:], stream)
	if _, err := w.Write(h[:]); err != nil {
		return err
	}
	_, err := w.Write(payload)
	return err
}

func readFrame(r io.Reader) (typ, flags byte, stream uint32, payload []byte, err error) {
	var h [h2FrameHdrSize]byte
	if _, err = io.ReadFull(r, h[:]); err != nil {
		return
	}
	n := int(h[0])<<16 | int(h[1])<<8 | int(h[2])
	payload = make([]byte, n)
	_, err = io.ReadFull(r, payload)
	return h[3], h[4], binary.BigEndian.Uint32(h[5:]) &^ (1 << 31), payload, err
}

// hpackLiteral encodes a header field as an HPACK literal without
// indexing, new name, no Huffman coding (RFC 7541 §6.2.2); name and value
// are shorter than 127 bytes.
func hpackLiteral(dst []byte, name, value string) []byte {
	dst = append(dst, 0x00, byte(len(name)))
	dst = append(dst, name...)
	dst = append(dst, byte(len(value)))
	return append(dst, value...)
}

// TestGRPCStreamFloodRefused opens more ShouldRateLimit streams on one
// connection than the server allows and never sends their messages: each
// would hold a handler goroutine forever. Without a bound (grpc-go's
// default), 200 000 such HEADERS frames on one connection took the server
// to 2.3 GB; with it, the server advertises DefaultGRPCMaxStreams and
// refuses every stream beyond it.
func TestGRPCStreamFloodRefused(t *testing.T) {
	e := newEnv(t)
	c, err := net.Dial("tcp", e.conn.Target())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	deadline := time.Now().Add(20 * time.Second)
	c.SetDeadline(deadline)
	br := bufio.NewReader(c)
	if _, err := io.WriteString(c, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	if err := writeFrame(c, h2Settings, 0, 0, nil); err != nil {
		t.Fatal(err)
	}
	advertised := uint32(0)
	for {
		typ, flags, _, p, err := readFrame(br)
		if err != nil {
			t.Fatalf("reading the server's SETTINGS: %v", err)
		}
		if typ != h2Settings || flags&h2Ack != 0 {
			continue
		}
		for i := 0; i+6 <= len(p); i += 6 {
			if binary.BigEndian.Uint16(p[i:]) == h2MaxStreams {
				advertised = binary.BigEndian.Uint32(p[i+2:])
			}
		}
		if err := writeFrame(c, h2Settings, h2Ack, 0, nil); err != nil {
			t.Fatal(err)
		}
		break
	}
	if advertised != server.DefaultGRPCMaxStreams {
		t.Errorf("SETTINGS_MAX_CONCURRENT_STREAMS = %d (0: not sent, no bound), want %d", advertised, server.DefaultGRPCMaxStreams)
	}

	const extra = 20
	var block []byte
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"},
		{":path", "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"}, {":authority", "floodgate"},
		{"content-type", "application/grpc"}, {"te", "trailers"}} {
		block = hpackLiteral(block, f[0], f[1])
	}
	werr := make(chan error, 1)
	go func() {
		bw := bufio.NewWriter(c)
		for i := range uint32(server.DefaultGRPCMaxStreams + extra) {
			if err := writeFrame(bw, h2Headers, h2EndHeaders, 2*i+1, block); err != nil {
				werr <- err
				return
			}
		}
		werr <- bw.Flush()
	}()
	refused := 0
	for refused < extra {
		typ, _, stream, p, err := readFrame(br)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("%d of the %d streams beyond the first %d refused by %v", refused, extra, server.DefaultGRPCMaxStreams, deadline)
		}
		if err != nil {
			t.Fatalf("after %d refused streams: %v", refused, err)
		}
		switch {
		case typ == h2RSTStream && len(p) == 4 && binary.BigEndian.Uint32(p) == h2RefusedCode:
			if stream <= 2*server.DefaultGRPCMaxStreams {
				t.Fatalf("stream %d refused, within the first %d", stream, server.DefaultGRPCMaxStreams)
			}
			refused++
		case typ == h2GoAway:
			t.Fatalf("GOAWAY after %d refused streams: %x", refused, p)
		}
	}
	if err := <-werr; err != nil {
		t.Fatalf("writing the streams: %v", err)
	}
}

// TestGRPCMaxStreamsOption: the bound is an option, and 0 is refused
// rather than read as no bound.
func TestGRPCMaxStreamsOption(t *testing.T) {
	st, err := memory.New(memory.WithSweepInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	e := newEnv(t)
	if _, err := server.New(e.eng, st, server.WithGRPCMaxStreams(0)); err == nil {
		t.Error("WithGRPCMaxStreams(0): no error")
	}
}
