package tensorbridge

// InFlight is the number of runs and compiles under way on b (for
// TestCompileCutOffThenClose: Close must return while one is).
func InFlight(b *Backend) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.inflight
}

// DriverClosed reports whether b's driver was closed (by Close, or after
// it by the last work in flight).
func DriverClosed(b *Backend) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.driverClosed
}
