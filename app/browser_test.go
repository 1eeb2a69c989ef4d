package app_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"rawwatch/app"
	"rawwatch/internal/controlplane"
	"rawwatch/internal/testkit"
	"rawwatch/reconcile/myresource"
)

// chromium finds a Chromium to drive: $RAWWATCH_CHROMIUM, else one on PATH
// (hack/ensure-chromium.sh installs Debian's when it may; make test runs it).
func chromium(t *testing.T) string {
	if p := os.Getenv("RAWWATCH_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("SKIPPED: no Chromium to test the live page in (install Debian's chromium, or run hack/ensure-chromium.sh, or set RAWWATCH_CHROMIUM)")
	return ""
}

// The live page, in a real headless Chromium, while the controller works
// against the real apiserver through a fault proxy: it shows the watcher
// Watching, then, when the proxy ends the stream with a 410 Expired, the
// transition to Relisting with its reason, the 410 and the relist in the
// timeline, and the failing object waiting out its retry in the queue. A
// screenshot goes to out/ui.png.
func TestLivePageInABrowser(t *testing.T) {
	browser := chromium(t)
	cp, ns, c := testkit.Parallel(t)
	proxy, viaProxy := testkit.Proxy(t, cp, cp.APIServer)
	for _, name := range []string{"hello", "greeting", "welcome"} {
		testkit.Create(t, c, ns, name, "hi")
	}
	testkit.Create(t, c, ns, "broken", myresource.FailMessage)
	a, _, _ := startAppWith(t, app.Options{Config: viaProxy, Namespace: ns, UIAddr: "127.0.0.1:0",
		RetryBase: 2 * time.Second, RetryMax: 30 * time.Second, FreshnessProbe: time.Second})

	alloc, cancel := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(browser), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck, chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.Flag("disable-quic", true),
		chromedp.WindowSize(1500, 1000))
	defer cancel()
	ctx, cancel := chromedp.NewContext(alloc, chromedp.WithLogf(t.Logf))
	defer cancel()
	ctx, cancel = context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	url := fmt.Sprintf("http://%s/", a.UIAddr()) // redirects to /ui/

	// waitFor polls the page until the JavaScript expression is true.
	waitFor := func(what, js string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](js))
			if err != nil {
				t.Fatalf("evaluating %q: %v", js, err)
			}
			if ok {
				return
			}
			if time.Now().After(deadline) {
				text, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText`))
				t.Fatalf("the page never showed %s; it shows:\n%s", what, text)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	if _, err := chromedp.Run(ctx, chromedp.Navigate(url)); err != nil {
		t.Fatalf("opening %s in Chromium: %v", url, err)
	}
	waitFor("the connection live", `document.getElementById("conn").textContent === "live"`)
	waitFor("the watcher Watching, lit in the diagram",
		`document.getElementById("state").textContent === "Watching" && document.querySelector('.node.lit').dataset.state === "Watching"`)
	waitFor("the store's four objects", `document.getElementById("store").textContent === "5"`) // and the probe's
	waitFor("the broken object waiting out a retry in the queue",
		fmt.Sprintf(`[...document.querySelectorAll('#delayed tbody tr')].some(r => r.dataset.key === %q && Number(r.cells[2].textContent) >= 1)`, ns+"/broken"))

	if n := proxy.ExpireWatches(); n == 0 {
		t.Fatal("no watch stream to expire")
	}
	waitFor("the 410 in the timeline", `document.querySelector('#timeline li.gone[data-kind="ended"]') !== null`)
	waitFor("the transition to Relisting with its reason",
		`[...document.querySelectorAll('#transitions li')].some(l => l.dataset.to === "Relisting" && /410|expired|too old/i.test(l.textContent))`)
	waitFor("the relist in the timeline", `document.querySelector('#timeline li[data-kind="replaced"]') !== null`)
	waitFor("the relist in the store's facts", `/^relist at RV/.test(document.getElementById("relist").textContent)`)
	waitFor("the watcher back to Watching", `document.getElementById("state").textContent === "Watching"`)
	waitFor("a freshness probe measure", `/reconcile \d/.test(document.getElementById("probe").textContent)`)

	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	var root string
	root, err = controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(root, "out", "ui.png")
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(out, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot of the live page: %s (%d bytes)", out, len(png))
}
