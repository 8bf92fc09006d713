package redis

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate/floodgate/store"
)

// AckError is the error of a call whose writes fewer replicas than
// WithWait asks acknowledged within its timeout: the master made them,
// and a failover may lose them. It wraps store.ErrUnavailable, so that
// the failure policy answers the decision, unless WAIT itself was
// refused for a fault of the deployment (NOPERM: the user lacks +wait),
// which no policy should answer for: it then wraps ErrPermission, as a
// call's error does (see replyerr.go).
type AckError struct {
	Acked, Want int           // replicas that acknowledged, and that must
	Within      time.Duration // WAIT's timeout
	// Err is WAIT's own failure (a replica refuses WAIT, the connection
	// broke after the script's reply), nil when WAIT answered.
	Err error
}

func (e *AckError) Error() string {
	if e.Err != nil {
		msg := fmt.Sprintf("written but not acknowledged by %d replicas: WAIT: %v", e.Want, e.Err)
		if r := replyRefusal(e.Err, ""); r != nil {
			msg += " (" + r.hint + ")"
		}
		return msg
	}
	replicas := "replicas"
	if e.Want == 1 {
		replicas = "replica"
	}
	msg := fmt.Sprintf("written but acknowledged by %d of %d %s within %v", e.Acked, e.Want, replicas, e.Within)
	if e.Acked == 0 {
		// The usual cause: no replica is attached (a standalone server, a
		// replica down or still syncing), not a slow one.
		msg += " (is a replica connected? the master's INFO replication shows connected_slaves)"
	}
	return msg
}

// Unwrap returns store.ErrUnavailable, or the kind of WAIT's refusal,
// and WAIT's failure, if any.
func (e *AckError) Unwrap() []error {
	if e.Err != nil {
		if r := replyRefusal(e.Err, ""); r != nil {
			if r.kind == nil {
				return []error{e.Err}
			}
			return []error{r.kind, e.Err}
		}
		return []error{store.ErrUnavailable, e.Err}
	}
	return []error{store.ErrUnavailable}
}

// reply is a script call's result and, under WithWait, what its WAIT
// said: unacked is the *AckError of a call whose writes were not
// acknowledged (nil when they were, without WithWait, or when the script
// failed: its own error then says more).
type reply struct {
	rueidis.RedisResult
	unacked error
}

// waits reports whether a script call of op that wrote is followed by
// WAIT.
func (s *Store) waits(writes bool) bool { return writes && s.o.waitReplicas > 0 }

// evalAck runs a program as eval does and, when it writes (see waits),
// WAIT after it on the same connection.
func (s *Store) evalAck(ctx context.Context, p program, keys, args []string, writes bool) reply {
	if !s.waits(writes) {
		return reply{RedisResult: s.eval(ctx, p, keys, args)}
	}
	// A pipeline holding WAIT, a blocking command, runs on a connection
	// of rueidis's pool for blocking commands, which it holds alone and
	// on which the connection's reply timeout does not apply: the
	// store's timeout bounds it instead.
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.o.timeout)
		defer cancel()
	}
	script := func(sha bool) rueidis.Completed { return s.scriptCmd(p, keys, args, !sha) }
	r, w := s.runWait(ctx, script, true)
	if isNoScript(r.Error()) {
		r, w = s.runWait(ctx, script, false)
	}
	return reply{RedisResult: r, unacked: s.acked(r, w)}
}

// waitCmd is WAIT with the store's count and timeout (WithWait's; see
// Replicas for another).
func (s *Store) waitCmd(timeout time.Duration) rueidis.Completed {
	return s.client.B().Wait().Numreplicas(int64(s.o.waitReplicas)).Timeout(waitMS(timeout).Milliseconds()).Build()
}

// runWait sends script(sha) and WAIT in one round trip on one connection
// of the node that runs the script, and returns their results. rueidis
// sends a pipeline that holds a blocking command (WAIT is one) on a
// connection of its own, in order, so WAIT counts the acknowledgements of
// the script's writes (Redis waits for the offset of the connection's
// last write). On a Cluster the client would follow a MOVED or ASK
// redirection of the script to another node alone, leaving WAIT on the
// first, which ran nothing: the pair goes on a dedicated connection that
// does not follow them, and a redirected script is sent again with its
// WAIT to the node named (after ASKING, for ASK).
//
// A caller waits for one of waitSlots first, as many as the pool has
// connections, so that it never waits in the pool itself: rueidis' pool
// (v1.0.79) answers a caller whose context ends while it waits with a
// dead connection, then counts that connection's return as a real one's
// and lets one more connection be opened. Under load past the pool (a
// replica lagging, each WAIT holding its connection for wait_timeout),
// 64 goroutines with short deadlines on a pool of 2 left 60 connections
// open (TestWaitPoolExhaustion).
func (s *Store) runWait(ctx context.Context, script func(sha bool) rueidis.Completed, sha bool) (r, w rueidis.RedisResult) {
	select {
	case s.waitSlots <- struct{}{}:
	case <-ctx.Done():
		r = rueidis.NewErrorResult(ctx.Err())
		return r, r
	}
	defer func() { <-s.waitSlots }()
	if err := ctx.Err(); err != nil { // both were ready
		r = rueidis.NewErrorResult(err)
		return r, r
	}
	if s.mode != Cluster {
		rs := s.client.DoMulti(ctx, script(sha), s.waitCmd(s.o.waitTimeout))
		return rs[0], rs[1]
	}
	var rs []rueidis.RedisResult
	_ = s.client.Dedicated(func(c rueidis.DedicatedClient) error {
		rs = c.DoMulti(ctx, script(sha), s.waitCmd(s.o.waitTimeout))
		return nil
	})
	re, ok := rueidis.IsRedisErr(rs[0].Error())
	if !ok {
		return rs[0], rs[1]
	}
	addr, ask := re.IsAsk()
	if !ask {
		var moved bool
		if addr, moved = re.IsMoved(); !moved {
			return rs[0], rs[1]
		}
	}
	node, known := s.client.Nodes()[addr]
	if !known {
		return rs[0], rs[1] // the client's next slot map will know it
	}
	cmds := make(rueidis.Commands, 0, 3)
	if ask {
		cmds = append(cmds, node.B().Asking().Build())
	}
	cmds = append(cmds, script(sha), s.waitCmd(s.o.waitTimeout))
	rs = node.DoMulti(ctx, cmds...)
	if ask {
		rs = rs[1:]
	}
	return rs[0], rs[1]
}

// acked returns the *AckError of a script's WAIT result w, or nil when
// enough replicas acknowledged its writes or the script r failed.
func (s *Store) acked(r, w rueidis.RedisResult) error {
	if r.Error() != nil {
		return nil
	}
	n, err := w.AsInt64()
	if err != nil {
		return &AckError{Want: s.o.waitReplicas, Within: s.o.waitTimeout, Err: err}
	}
	if n < int64(s.o.waitReplicas) {
		return &AckError{Acked: int(n), Want: s.o.waitReplicas, Within: s.o.waitTimeout}
	}
	return nil
}

// evalAckEach runs calls (of several Cluster slots) as evalAck does, each
// on its node's connection at the same time.
func (s *Store) evalAckEach(ctx context.Context, calls []scriptArgs) []reply {
	res := make([]reply, len(calls))
	var wg sync.WaitGroup
	for i := range calls {
		wg.Go(func() {
			res[i] = s.evalAck(ctx, programFor(&calls[i]), calls[i].keys, calls[i].argv(s.ttlFloor), calls[i].writes)
		})
	}
	wg.Wait()
	return res
}

// Replicas reports, under WithWait, how many replicas of the probe key's
// master (WithProbeKey; on a Cluster that master only) acknowledge writes
// within timeout (0: the WAIT timeout of WithWait, rounded up to a
// millisecond), and how many the store waits for: WAIT answers at once
// when enough replicas are attached and in sync, and at its timeout with
// the count otherwise. With fewer than want, every admission fails with
// an *AckError (a refusal still stands) until they are attached. Without
// WithWait it returns 0, 0, nil.
func (s *Store) Replicas(ctx context.Context, timeout time.Duration) (acked, want int, err error) {
	if s.o.waitReplicas == 0 {
		return 0, 0, nil
	}
	if timeout <= 0 {
		timeout = s.o.waitTimeout
	}
	n, err := s.client.Do(ctx, s.waitCmd(timeout).SetSlot(s.o.probeKey)).AsInt64()
	if err != nil {
		return 0, s.o.waitReplicas, fmt.Errorf("redis: WAIT: %w", err)
	}
	return int(n), s.o.waitReplicas, nil
}

// waitProbe checks, for Open, that the user may run WAIT: WAIT 0 0
// answers at once. On a Cluster it goes to the probe key's master (a
// replica refuses WAIT).
func (s *Store) waitProbe(ctx context.Context, key string) string {
	if s.o.waitReplicas == 0 {
		return ""
	}
	err := s.client.Do(ctx, s.client.B().Wait().Numreplicas(0).Timeout(0).Build().SetSlot(key)).Error()
	if err == nil {
		return ""
	}
	return "WAIT: " + err.Error()
}
