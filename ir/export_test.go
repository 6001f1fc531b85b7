package ir

import (
	"fmt"
	"sync"
	"testing"
)

// BuilderFieldFound reports whether GoMLX's Graph has the builder field
// SetDonation reaches.
func BuilderFieldFound() bool { return builderOK }

// SimulateBuilderFieldMissing makes SetDonation behave, until the test
// ends, as if GoMLX's Graph had lost its builder field, and returns the
// warnings it logs from then on.
func SimulateBuilderFieldMissing(t *testing.T) (warnings func() []string) {
	t.Helper()
	var mu sync.Mutex
	var got []string
	oldReach, oldWarn := builderReachable, warn
	builderReachable = false
	donationOff = sync.Once{}
	warn = func(msg string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, fmt.Sprint(append([]any{msg}, args...)...))
	}
	t.Cleanup(func() {
		builderReachable, warn = oldReach, oldWarn
		donationOff = sync.Once{}
	})
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), got...)
	}
}
