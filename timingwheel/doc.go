// Package timingwheel schedules many timed callbacks on Kafka's
// hierarchical timing wheel, with a delay-operation purgatory on top
// (package purgatory).
//
// # Design
//
// Time is counted in ticks (Options.Tick, 1 ms by default) from the
// timer's creation. A wheel is WheelSize buckets (20 by default); a
// bucket of the finest wheel spans one tick, so that wheel covers
// WheelSize ticks ahead of its clock. A deadline beyond that goes to an
// overflow wheel whose buckets span a whole wheel below (20 ticks, then
// 400, 8,000, …); overflow wheels are made on first need, and seven wheels
// in all reach two weeks ahead. A task goes into the finest wheel that
// covers its deadline rounded up to a tick, in the bucket for that tick
// range; a bucket is an intrusive doubly linked list, and a task knows its
// bucket, so insert costs O(number of wheels) and cancel O(1).
//
//	level  bucket span   wheel span (tick 1 ms, 20 buckets)
//	0      1 ms          20 ms
//	1      20 ms         400 ms
//	2      400 ms        8 s
//	3      8 s           160 s
//	4      160 s         53 min
//	5      53 min        17.8 h
//	6      17.8 h        14.8 days
//
// Buckets that hold tasks sit in a min-heap on their expiration (the
// start of their span), one entry a bucket, not a task; the heap has at
// most levels×WheelSize entries. The clock jumps straight to the earliest
// bucket's expiration, never ticking through empty buckets. When a bucket
// expires, each of its tasks is added again at the new time: due tasks
// fire, the others cascade down to a finer wheel. A task cascades at most
// once a level.
//
// One goroutine drives a Timer made with New: it sleeps until the
// earliest bucket expires, until a task due earlier is scheduled, or
// until Close or the context's end. A Manual timer (NewManual) has no
// goroutine: its tasks fire inside Advance, which tests call after moving
// a Clock of their own, deterministically.
//
// # Guarantees
//
// A task fires at the first tick at or after its deadline: never before
// the deadline, and no later than one tick after it when the driver is
// not starved (a callback that runs long, or a busy machine, delays the
// tasks behind it). Tasks due at the same step fire one at a time, in the
// order of their ticks. A task fires at most once per Schedule or Reset;
// Cancel that returns true means it will not fire; after Close returns,
// no callback runs.
//
// # Concurrency
//
// Every method MAY be called from any goroutine, and from callbacks,
// except Close and Manual.Advance, which wait for the running callback and
// so MUST NOT be called from one. Callbacks run on the driver goroutine
// (or inside Advance), never on the goroutine that scheduled them, and
// MUST be quick: hand heavy work to a goroutine or a work queue (see the
// example). Lock order: Timer.advanceMu, then Timer.mu; no lock is held
// while a callback runs.
//
// # Memory
//
// A pending task is one 48-byte Task (plus what its callback captures);
// nothing is allocated per tick. The wheels are levels×WheelSize buckets
// of 24 bytes, made once. Reset moves a task without allocating.
//
// # Performance
//
// Beside time.AfterFunc and a container/heap scheduler with one driver
// goroutine (bench_test.go; medians of 3 runs on 2 shared cores; ns per
// task at 1,000 / 100,000 / 1,000,000 pending):
//
//	                        wheel           AfterFunc          heap
//	schedule+cancel         135/274/222     297/335/281        237/382/411
//	reset a pending task    72/218/309      47/173/571         105/152/786
//	schedule+fire, CPU      192/435/525     574/1078/1634      338/605/938
//	bytes per pending task  48              115-128            33
//
// Go's runtime timers reset a pending timer faster up to 100,000 pending,
// and fire to the nanosecond rather than the tick. The wheel costs a third
// of AfterFunc's CPU a firing (no goroutine a firing: the bulk expiry of
// parked requests), less than half its memory a pending task, and cancels
// in O(1) whatever the count.
package timingwheel
