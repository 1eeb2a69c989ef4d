package node

import (
	"bufio"
	"encoding/json"
	"os"
	"testing"
	"time"
)

// auditEvent is what the tests read of the apiserver's audit log (the
// requests of rawwatch-system's ServiceAccounts: node.Node.AuditLog).
type auditEvent struct {
	Stage     string `json:"stage"`
	Verb      string `json:"verb"`
	ObjectRef struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
		Namespace   string `json:"namespace"`
		Name        string `json:"name"`
	} `json:"objectRef"`
	ResponseStatus struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
	User struct {
		Username string              `json:"username"`
		Extra    map[string][]string `json:"extra"`
	} `json:"user"`
	RequestReceived time.Time `json:"requestReceivedTimestamp"`
}

// auditEvents are the audit log's events of requests received after since,
// one per request (a watch's ResponseStarted stage is left out).
func auditEvents(t *testing.T, since time.Time) []auditEvent {
	t.Helper()
	f, err := os.Open(cluster.AuditLog())
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []auditEvent
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 4<<20)
	for sc.Scan() {
		var e auditEvent
		if json.Unmarshal(sc.Bytes(), &e) != nil || e.RequestReceived.Before(since) || e.Stage == "ResponseStarted" {
			continue
		}
		out = append(out, e)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
