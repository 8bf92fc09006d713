package loadgen

import (
	"errors"
	"testing"
	"time"
)

// TestAnsweredNeverMovesBack: of two callers noting answers at once, the
// one that read lastAnswer first and writes last does not move it back
// over the later answer the other wrote meanwhile. It did (a read, then a
// Store), so the server looked silent since the earlier answer and a
// connection error DownAfter after it, 50ms after the later one, ended
// the run as gone.
func TestAnsweredNeverMovesBack(t *testing.T) {
	stopped := false
	w := &downWatch{after: 2 * time.Second, stop: func() { stopped = true }}
	paused, resume, done := make(chan struct{}), make(chan struct{}), make(chan struct{})
	first := true
	answeredHook = func() {
		if first { // the first caller only, between its read and its write
			first = false
			close(paused)
			<-resume
		}
	}
	defer func() { answeredHook = nil }()
	go func() {
		defer close(done)
		w.answered(100 * time.Millisecond)
	}()
	<-paused
	w.answered(200 * time.Millisecond) // the other caller, a later answer
	close(resume)
	<-done
	if got := time.Duration(w.lastAnswer.Load()); got != 200*time.Millisecond {
		t.Errorf("lastAnswer %v after answers at 100ms and 200ms, want 200ms", got)
	}
	w.failed(2150*time.Millisecond, errors.New("connection refused"))
	if stopped || w.tripped.Load() {
		t.Errorf("a connection error at 2.15s, 1.95s after the last answer, ended the run as gone (DownAfter 2s)")
	}
}
