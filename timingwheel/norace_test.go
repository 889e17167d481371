//go:build !race

package timingwheel

const raceEnabled = false
