package faultproxy

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// An apiserver that is down (killed, restarting) is passed on as one: no
// kube-apiserver answers 502, a dead one answers nothing. The request in
// hand gets no answer, its connection closed; new connections are refused
// until the apiserver listens again, then pass.
func TestProxyPassesADeadAPIServerOnAsOneNot502(t *testing.T) {
	u, p, c := newUpstream(t)
	c.Transport.(*http.Transport).DisableKeepAlives = true
	addr := u.srv.Listener.Addr().String()
	u.srv.Close()
	resp, err := c.Get(p.URL + listPath)
	if err == nil {
		resp.Body.Close()
		t.Fatalf("the apiserver down: the proxy answered %s, want no answer", resp.Status)
	}
	t.Logf("the request in hand: %v", err)
	waitFor(t, func() bool {
		_, err := c.Get(p.URL + listPath)
		return err != nil && strings.Contains(err.Error(), "connection refused")
	}, "the proxy never refused connections while the apiserver was down")

	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("the apiserver's port was taken meanwhile: %v", err)
	}
	back := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte(`{"kind":"MyResourceList","items":[],"metadata":{"resourceVersion":"1"}}`))
	}))
	back.Listener.Close()
	back.Listener = ln
	back.StartTLS()
	defer back.Close()
	waitFor(t, func() bool {
		resp, err := c.Get(p.URL + listPath)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, "the proxy never passed requests again once the apiserver was back")
}
