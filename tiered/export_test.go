package tiered

import "github.com/tierlog/tierlog/local"

// LocalOf returns the local log under p, for tests that look (and write)
// beneath the partition: nothing outside the package's tests has it.
func LocalOf(p *Partition) *local.Log { return p.local }
