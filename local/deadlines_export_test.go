package local

// Test hooks for package local_test (compiled into the tests only).

// WaitDeadlines waits until no deadline work of the Backend is queued or
// running.
func (b *Backend) WaitDeadlines() { b.sched.idle() }

// DeadlineRuns counts the runs of deadline work the Backend's pool did.
func (b *Backend) DeadlineRuns() int64 {
	b.sched.mu.Lock()
	defer b.sched.mu.Unlock()
	return b.sched.runs
}

// SweepFinds does what Backend's periodic sweep did before the deadlines
// moved onto the timing wheel (retention, flush.ms, and the removal of
// .deleted files whose delay passed) for every open log, and counts the
// work it found to do: 0 when every deadline due was met already.
func (b *Backend) SweepFinds() int {
	found := 0
	for _, l := range b.Logs() {
		n, err := l.DeleteOldSegments()
		if err == nil {
			found += n
		}
		l.mu.Lock()
		now := l.now()
		if at, ok := msAfter(l.lastFlush, l.cfg.Load().FlushMs); ok && !now.Before(at) && l.unflushedLocked() {
			found++
			l.flushLocked()
		}
		if at, ok := l.idleRollAtLocked(); ok && !now.Before(at) {
			found++
		}
		for _, p := range l.pending {
			if at, ok := msAfter(p.retired, l.cfg.Load().FileDeleteDelayMs); ok && !now.Before(at) {
				found++
			}
		}
		l.mu.Unlock()
	}
	return found
}
