package local

// Test hooks for the file budget (compiled into the tests only).

// OpenWithIndexMemory is Open for a log alone whose budget keeps at most
// indexBytes of in-memory indexes (defaultIndexMemory otherwise).
func OpenWithIndexMemory(dir string, opts Options, indexBytes int64) (*Log, error) {
	opts.budget = newFileBudget(opts.MaxOpenSegmentFiles)
	opts.budget.maxIndexBytes = indexBytes
	return Open(dir, opts)
}

// BudgetEvictions counts the segments the log's file budget closed.
func (l *Log) BudgetEvictions() int64 { return l.segOpts.budget.evictions.Load() }

// BudgetIndexDrops counts the segments whose in-memory indexes the log's
// budget dropped.
func (l *Log) BudgetIndexDrops() int64 { return l.segOpts.budget.indexDrops.Load() }
