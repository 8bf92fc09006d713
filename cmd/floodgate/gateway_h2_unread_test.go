package main

import (
	"encoding/binary"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// h2Frame writes an HTTP/2 frame header and payload to c.
func h2Frame(t *testing.T, c net.Conn, typ, flags byte, stream uint32, payload []byte) {
	t.Helper()
	h := make([]byte, 9, 9+len(payload))
	h[0], h[1], h[2] = byte(len(payload)>>16), byte(len(payload)>>8), byte(len(payload))
	h[3], h[4] = typ, flags
	binary.BigEndian.PutUint32(h[5:], stream)
	if _, err := c.Write(append(h, payload...)); err != nil {
		t.Fatal(err)
	}
}

// hpackLiteral encodes each name, value pair as a literal header field
// without indexing (RFC 7541 §6.2.2), no Huffman: short strings only.
func hpackLiteral(pairs ...string) []byte {
	var b []byte
	for i := 0; i < len(pairs); i += 2 {
		b = append(b, 0, byte(len(pairs[i])))
		b = append(b, pairs[i]...)
		b = append(b, byte(len(pairs[i+1])))
		b = append(b, pairs[i+1]...)
	}
	return b
}

// A client that opens a stream over h2c and takes none of the response
// has its request aborted after --client-timeout, its concurrency slot
// freed, as over HTTP/1.1, whether it reads its connection but never
// opens the stream's flow-control window (the per-stream write deadline
// resets the stream), or grants all the window there is and never reads
// the connection: there the per-stream deadline alone could not do it,
// its RST_STREAM queued behind the connection's blocked write, and the
// handler, the slot and the upstream request were held for as long as
// the client kept the connection open.
func TestServeGatewayH2ClientThatNeverReads(t *testing.T) {
	upEnded := make(chan struct{}, 4)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/big" {
			io.WriteString(w, "fast")
			return
		}
		defer func() { upEnded <- struct{}{} }()
		chunk := make([]byte, 32<<10)
		for range 32 << 10 { // up to 1 GB, until the gateway goes away
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	}))
	t.Cleanup(up.Close)
	cfg := filepath.Join(t.TempDir(), "slots.yaml")
	if err := os.WriteFile(cfg, []byte(`domain: edge
gateway:
  routes: [{descriptors: [{entries: [{source: remote_address}]}]}]
descriptors:
  - key: remote_address
    rate_limit: {name: slots, algorithm: concurrency, requests_per_unit: 1, lease_ttl: 1m}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startBinary(t, nil, "--config", cfg, "--upstream", up.URL, "--client-timeout", "300ms")
	addr := gatewayAddr(t, p.Stdout())

	for _, readsConn := range []bool{true, false} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		io.WriteString(c, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
		if readsConn {
			h2Frame(t, c, 0x4, 0, 0, nil) // the default window, 64 KB, never opened further
			go io.Copy(io.Discard, c)
		} else {
			_ = c.(*net.TCPConn).SetReadBuffer(4 << 10)
			h2Frame(t, c, 0x4, 0, 0, []byte{0, 0x4, 0x7f, 0xff, 0xff, 0xff}) // SETTINGS_INITIAL_WINDOW_SIZE 2^31-1
			h2Frame(t, c, 0x8, 0, 0, binary.BigEndian.AppendUint32(nil, 0x7fffffff-65535))
		}
		h2Frame(t, c, 0x4, 0x1, 0, nil) // ACK of the server's SETTINGS, read or not
		h2Frame(t, c, 0x1, 0x5, 1, hpackLiteral(":method", "GET", ":scheme", "http", ":path", "/big", ":authority", "x"))

		select {
		case <-upEnded:
		case <-time.After(10 * time.Second):
			t.Fatalf("reads its connection %v: the upstream request of a client that takes nothing still open after 10 s (--client-timeout 300ms)", readsConn)
		}
		// The slot is free: another connection of the same address passes.
		var resp *http.Response
		for deadline := time.Now().Add(5 * time.Second); ; {
			resp, err = http.Get("http://" + addr + "/fast")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode == 200 || time.Now().After(deadline) {
				break
			}
			time.Sleep(50 * time.Millisecond) // the handler returns just after the upstream request ends
		}
		if resp.StatusCode != 200 {
			t.Errorf("reads its connection %v: GET /fast after the stalled stream: %d, want 200 (its concurrency slot released)", readsConn, resp.StatusCode)
		}
	}
}
