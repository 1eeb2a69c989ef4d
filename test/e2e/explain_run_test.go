package e2e

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"rawwatch/internal/testkit"
	"rawwatch/reconcile/myresource"
)

// --explain in a real run: the narration on stdout follows what the
// controller does against the apiserver, and has no colour on a pipe.
func TestExplainNarratesARealRun(t *testing.T) {
	cp, ns, c := testkit.Parallel(t)
	ctx := context.Background()
	testkit.Objects(t, c, ns, "pre", 3)
	p := startBinary(t, nil, "--kubeconfig", cp.Kubeconfig, "--namespace", ns, "--explain", "--page-size", "2", "--retry-base-delay", "50ms")
	at := func(line string) *regexp.Regexp { return regexp.MustCompile(`(?m)^\d\d:\d\d:\d\d\.\d{3} ` + line) }
	p.waitLog(t, 30*time.Second, at(`SYNCED    the store holds 3 objects at resourceVersion \d+ \(3 Added deltas\)`))

	testkit.Create(t, c, ns, "live", "hi")
	testkit.Create(t, c, ns, "broken", myresource.FailMessage)
	p.waitLog(t, 30*time.Second, at(`RETRY     `+ns+`/broken in 100ms: spec.message is "fail"`))
	if err := c.Delete(ctx, ns, "live", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{
		`LIST      page 1: 2 items, continue token "[^"]+" → next page`,
		`LIST      page 2: 1 item, last page: the list is at resourceVersion \d+`,
		`DELTA       Added ` + ns + `/pre-\d`,
		`WATCH     from resourceVersion \d+ \(bookmarks on; the server ends it after \d+m\d+s\)`,
		`ADDED     ` + ns + `/live +resourceVersion \d+`,
		`ENQUEUE   ` + ns + `/live`,
		`WORKER \d  picks ` + ns + `/live \(waited [^ ]+ in the queue\)`,
		`DONE      worker \d reconciled ` + ns + `/live in `,
		`MODIFIED  ` + ns + `/live +resourceVersion \d+`, // our own status write, coming back
		`RETRY     ` + ns + `/broken in 50ms: `,
		`DELETED   ` + ns + `/live +resourceVersion \d+`,
	} {
		p.waitLog(t, 30*time.Second, at(line))
	}
	if out := p.output(); strings.Contains(out, "\x1b[") {
		t.Errorf("colour escapes on a pipe:\n%s", out)
	}
}
