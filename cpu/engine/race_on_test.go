//go:build race

package engine

// raceEnabled: the race detector makes sync.Pool drop items at random and
// instruments allocations, so allocation counts are not checked.
const raceEnabled = true
