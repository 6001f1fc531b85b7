//go:build race

package serve_test

// raceEnabled: the race detector allows 8,128 live goroutines, so the
// idle-connection test opens fewer connections under it.
const raceEnabled = true
