package redis

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/store"
)

// TestPausedConnectionRecovers: on a paused server (SIGSTOP), a take sent
// alone on its connection under a 300 ms deadline, and one queued behind
// it under 2 s. rueidis sends the first on the caller's goroutine with
// the connection's deadline set to the caller's; when it passes, it
// closes the connection and keeps that context.DeadlineExceeded as the
// connection's error, which the queued take gets at once (after about
// 300 ms, not its own 2 s). Both fail as outages (store.ErrUnavailable),
// neither after its deadline, and once the server resumes (SIGCONT) the
// next take is decided at once, on a new connection.
func TestPausedConnectionRecovers(t *testing.T) {
	srv := testserver.NewRedis(t)
	if srv == nil {
		return
	}
	s := openT(t, "redis://"+srv.Addr, WithTimeout(5*time.Second))
	l, err := algo.Compile(algo.Params{Algorithm: algo.FixedWindow, Limit: 1000, Period: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	reqs := []store.Request{{Key: runKey() + ":paused", Limit: l, Cost: 1}}
	take := func(dl time.Duration) (time.Duration, error) {
		ctx, cancel := context.WithTimeout(context.Background(), dl)
		defer cancel()
		start := time.Now()
		_, err := s.Take(ctx, reqs, make([]algo.Decision, 1))
		return time.Since(start), err
	}
	if _, err := take(time.Second); err != nil {
		t.Fatal(err)
	}
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	resumed := false
	defer func() {
		if !resumed {
			srv.Resume()
		}
	}()
	dls := []time.Duration{300 * time.Millisecond, 2 * time.Second}
	took, errs := make([]time.Duration, 2), make([]error, 2)
	var wg sync.WaitGroup
	for i, dl := range dls {
		wg.Go(func() { took[i], errs[i] = take(dl) })
		time.Sleep(20 * time.Millisecond) // the second queues behind the first
	}
	wg.Wait()
	for i, dl := range dls {
		t.Logf("take under %v on the paused server: %v after %v", dl, errs[i], took[i].Round(time.Millisecond))
		if !errors.Is(errs[i], store.ErrUnavailable) {
			t.Errorf("take under %v on the paused server: %v, want store.ErrUnavailable", dl, errs[i])
		}
		if took[i] > dl+200*time.Millisecond {
			t.Errorf("take under %v on the paused server failed after %v, past its deadline", dl, took[i])
		}
	}
	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
	resumed = true
	if d, err := take(time.Second); err != nil {
		t.Errorf("first take after the server resumed: %v after %v, want decided", err, d)
	}
}
