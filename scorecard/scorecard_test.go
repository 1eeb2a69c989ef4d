package scorecard

import (
	"testing"

	"rawwatch/internal/controlplane"
)

var shared = &controlplane.Shared{}

func TestMain(m *testing.M) {
	MaybeClientMain() // the clients are this test binary, run again
	shared.Main(m)
}
