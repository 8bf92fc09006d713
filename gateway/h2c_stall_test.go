package gateway_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/floodgate/floodgate/gateway"
)

// Over h2c with prior knowledge, as floodgate serve's gateway address now
// speaks it, a client that stops sending its request body gets 408 after
// the client timeout and its concurrency slot is free, as over HTTP/1.1
// (TestClientThatStopsSendingGets408): the body deadline is per stream.
func TestH2CClientThatStopsSendingGets408(t *testing.T) {
	e := engine(t, timeoutConfig, nil)
	gw, err := gateway.New(e.Config(), e, slowClients(t).URL,
		gateway.WithUpstreamTimeout(time.Minute), gateway.WithClientTimeout(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(gw)
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	t.Cleanup(tr.CloseIdleConnections)
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}

	pr, pw := io.Pipe()
	t.Cleanup(func() { pw.Close() })
	go pw.Write([]byte("0123456789")) // then nothing more
	req, _ := http.NewRequest("POST", srv.URL+"/upload", pr)
	req.ContentLength = 100
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("stalled upload over h2c: %v", err)
	}
	resp.Body.Close()
	if resp.ProtoMajor != 2 || resp.StatusCode != http.StatusRequestTimeout {
		t.Errorf("stalled upload: %s %d, want HTTP/2 408", resp.Proto, resp.StatusCode)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("answered after %v, want about 200ms", took)
	}
	resp, err = client.Get(srv.URL + "/fast")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("after the 408: %d, want 200 (slot released)", resp.StatusCode)
	}
}
