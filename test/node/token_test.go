package node

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"rawwatch/internal/testkit"
)

// tokenFile is the projected ServiceAccount token the kubelet keeps
// up to date in the pod with this UID.
func tokenFile(t *testing.T, uid string) string {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(cluster.PodDir(uid), "volumes", "kubernetes.io~projected", "kube-api-access-*", "token"))
	if len(m) != 1 {
		t.Fatalf("pod %s: want one projected token, found %v", uid, m)
	}
	return m[0]
}

// jti is the token's ID, which the apiserver records as the credential ID
// of each request made with it.
func jti(t *testing.T, token string) string {
	t.Helper()
	parts := strings.Split(strings.TrimSpace(token), ".")
	if len(parts) != 3 {
		t.Fatalf("not a JWT: %d parts", len(parts))
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var claims struct {
		JTI string `json:"jti"`
	}
	if err := json.Unmarshal(b, &claims); err != nil || claims.JTI == "" {
		t.Fatalf("token claims %s: %v", b, err)
	}
	return claims.JTI
}

// requestsOf are the audited requests of the pod named pod received after
// since, in order.
func requestsOf(t *testing.T, pod string, since time.Time) []auditEvent {
	t.Helper()
	var out []auditEvent
	for _, e := range auditEvents(t, since) {
		if p := e.User.Extra["authentication.kubernetes.io/pod-name"]; len(p) == 1 && p[0] == pod {
			out = append(out, e)
		}
	}
	return out
}

func credential(e auditEvent) string {
	if c := e.User.Extra["authentication.kubernetes.io/credential-id"]; len(c) == 1 {
		return c[0]
	}
	return ""
}

// tokenReread bounds how long a client of the controller goes on with a
// token file's old content: client-go rereads the file once its cached copy
// is a minute old (less a leeway), each client on its own.
const tokenReread = 65 * time.Second

// The kubelet replaces a pod's projected token with a new one (here because
// it restarted: its token cache is empty, so the next remount of the
// projected volume asks the TokenRequest API again; in a long-lived pod
// because 80% of the token's life has passed); the controller picks the new
// file up: once its every client has reread the file (tokenReread), every
// request it makes carries the new token (the apiserver's audit log records
// each request's credential ID, the token's jti), and it keeps reconciling.
// The pods are not restarted by the kubelet's restart.
func TestTheProjectedTokenRotatesAndTheControllerKeepsWorking(t *testing.T) {
	needNode(t)
	deployAny(t)
	restarts := map[string]int32{}
	pods := controllerPods(t)
	for _, p := range pods {
		restarts[p.Name] = p.Status.ContainerStatuses[0].RestartCount
	}
	pod, uid := pods[0].Name, string(pods[0].UID)
	file := tokenFile(t, uid)
	read := func() string {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	before := jti(t, read())
	start := time.Now()
	if err := cluster.RestartKubelet(context.Background()); err != nil {
		t.Fatal(err)
	}
	var after string
	waitUntil(t, 4*time.Minute, func() (bool, string) {
		after = jti(t, read())
		return after != before, "the token file still holds token " + before
	})
	changed := time.Now()
	var first time.Time
	waitUntil(t, 3*time.Minute, func() (bool, string) {
		for _, e := range requestsOf(t, pod, start) {
			if credential(e) == "JTI="+after {
				first = e.RequestReceived
				return true, ""
			}
		}
		return false, fmt.Sprintf("no request of %s with the new token %s yet", pod, after)
	})
	reread := changed.Add(tokenReread)
	time.Sleep(time.Until(reread))
	ns := testkit.Namespace(t, cluster.Config())
	testkit.Create(t, mr, ns, "after-rotation", "still working")
	waitProcessed(t, ns, 1, time.Minute)
	var old, fresh int
	waitUntil(t, time.Minute, func() (bool, string) { // a few of its requests, each client's Lease renewals among them
		old, fresh = 0, 0
		for _, e := range requestsOf(t, pod, reread) {
			switch credential(e) {
			case "JTI=" + before:
				old++
			case "JTI=" + after:
				fresh++
			}
		}
		return old+fresh >= 5, fmt.Sprintf("%d requests of %s since %s", old+fresh, pod, reread.Format("15:04:05"))
	})
	t.Logf("token %s replaced by %s %s after the kubelet's restart; the controller's first request with it %s after the file changed; from %s after that, %d requests with the new token, %d with the old",
		before, after, changed.Sub(start).Round(time.Second), first.Sub(changed).Round(time.Second), tokenReread, fresh, old)
	if old > 0 || fresh == 0 {
		t.Errorf("%s after the token file changed, %s made %d requests with the old token and %d with the new", tokenReread, pod, old, fresh)
	}
	for _, p := range controllerPods(t) {
		if r, ok := restarts[p.Name]; !ok || p.Status.ContainerStatuses[0].RestartCount != r {
			t.Errorf("pod %s was replaced or restarted by the kubelet's restart (restarts %d, before %d)", p.Name, p.Status.ContainerStatuses[0].RestartCount, r)
		}
	}
}
