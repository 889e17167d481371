//go:build race

package record_test

// raceEnabled: under the race detector sync.Pool drops items at random,
// so the decoders that pool their state allocate; the allocation test
// holds only uncompressed validation to zero then.
const raceEnabled = true
