// Package testreq lets a test skip when what it needs (a plugin, a data
// set) is not installed, except in CI, where a missing piece fails the test.
//
// scripts/test.sh installs every plugin and data set first and sets
// TENSORBRIDGE_REQUIRE_TESTDATA=1, so that no test turns green there with
// nothing tested.
package testreq

import (
	"os"
	"testing"
)

// Env is the variable that turns these skips into failures.
const Env = "TENSORBRIDGE_REQUIRE_TESTDATA"

// Required reports whether missing test prerequisites are failures.
func Required() bool { return os.Getenv(Env) == "1" }

// Skipf skips t with the message, or fails it when Required.
func Skipf(t testing.TB, format string, args ...any) {
	t.Helper()
	if Required() {
		t.Fatalf("required by "+Env+"=1: "+format, args...)
	}
	t.Skipf(format, args...)
}
