package local

// Test hooks for the file budget (compiled into the tests only).

// OpenWithIndexBounds is Open for a log alone whose budget keeps at most
// indexBytes of memory and indexMaps mappings of read-only indexes
// (defaultIndexMemory and defaultIndexMappings otherwise).
func OpenWithIndexBounds(dir string, opts Options, indexBytes int64, indexMaps int) (*Log, error) {
	opts.budget = newFileBudget(opts.MaxOpenSegmentFiles)
	opts.budget.maxIndexBytes, opts.budget.maxIndexMaps = indexBytes, indexMaps
	return Open(dir, opts)
}

// BudgetEvictions counts the segments the log's file budget closed.
func (l *Log) BudgetEvictions() int64 { return l.segOpts.budget.evictions.Load() }

// BudgetIndexDrops counts the segments whose read-only indexes the log's
// budget dropped.
func (l *Log) BudgetIndexDrops() int64 { return l.segOpts.budget.indexDrops.Load() }
