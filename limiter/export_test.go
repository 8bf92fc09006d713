package limiter

// WaitQueues returns the number of l's keys with a Wait queue and of the
// waiters holding one, for tests that check the queues do not outlive
// their waiters.
func WaitQueues(l *Limiter) (keys int, waiters int64) { return l.waits.counts() }

// LocalWaitQueues is WaitQueues for a Local.
func LocalWaitQueues(l *Local) (keys int, waiters int64) { return l.waits.counts() }

func (ws *waitQueues) counts() (int, int64) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	return len(ws.m), ws.n.Load()
}
