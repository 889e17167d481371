package timingwheel_test

import (
	"context"
	"fmt"
	"time"

	"github.com/tierlog/tierlog/timingwheel"
)

// A partition's segment roll. The callback runs on the driver goroutine,
// so it only signals; the roll itself, which does I/O, runs on the
// partition's goroutine, which then moves the same task to the next roll
// (Reset allocates nothing).
func Example() {
	timer, err := timingwheel.New(context.Background(), timingwheel.Options{})
	if err != nil {
		panic(err)
	}
	defer timer.Close()

	const segmentRoll = 5 * time.Millisecond
	due := make(chan struct{}, 1)
	roll, err := timer.AfterFunc(segmentRoll, func() {
		select {
		case due <- struct{}{}:
		default: // a roll is already waiting
		}
	})
	if err != nil {
		panic(err)
	}
	for n := 1; n <= 3; n++ {
		<-due
		fmt.Println("roll", n) // the heavy work, off the driver goroutine
		if err := roll.Reset(timer.Now().Add(segmentRoll)); err != nil {
			panic(err)
		}
	}
	fmt.Println("pending:", timer.Pending(), "cancelled:", roll.Cancel())
	// Output:
	// roll 1
	// roll 2
	// roll 3
	// pending: 1 cancelled: true
}

// Tests drive a Manual timer with a clock they move by hand.
func ExampleManual() {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	timer, err := timingwheel.NewManual(timingwheel.Options{Clock: timingwheel.ClockFunc(func() time.Time { return now })})
	if err != nil {
		panic(err)
	}
	defer timer.Close()
	_, _ = timer.AfterFunc(7*24*time.Hour, func() { fmt.Println("retention check") })
	cleanup, _ := timer.AfterFunc(time.Minute, func() { fmt.Println("delete .deleted files") })

	now = now.Add(59 * time.Second)
	fmt.Println("fired", timer.Advance())
	now = now.Add(time.Second)
	fmt.Println("fired", timer.Advance())
	fmt.Println("cancel after firing:", cleanup.Cancel())
	now = now.Add(7 * 24 * time.Hour)
	fmt.Println("fired", timer.Advance())
	// Output:
	// fired 0
	// delete .deleted files
	// fired 1
	// cancel after firing: false
	// retention check
	// fired 1
}
