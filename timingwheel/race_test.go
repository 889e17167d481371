//go:build race

package timingwheel

// raceEnabled: TestModel, which runs on one goroutine and so gains nothing
// from the race detector, runs fewer seeds under it.
const raceEnabled = true
