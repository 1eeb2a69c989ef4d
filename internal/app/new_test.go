package app_test

import (
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"rawwatch/internal/app"
	"rawwatch/internal/testkit"
)

// A New that fails (here: the metrics port is taken) leaves nothing running:
// the event broadcaster it had started is shut down.
func TestFailedNewLeaksNoGoroutine(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	before := runtime.NumGoroutine()
	for range 10 {
		_, err := app.New(app.Options{Config: &rest.Config{Host: "https://127.0.0.1:1"}, MetricsAddr: taken.Addr().String()})
		if err == nil || !strings.Contains(err.Error(), "address already in use") {
			t.Fatalf("New with the metrics port taken: %v, want address already in use", err)
		}
	}
	testkit.Eventually(t, 5*time.Second, func() bool { return runtime.NumGoroutine() <= before },
		"goroutines left behind by ten failed News")
}
