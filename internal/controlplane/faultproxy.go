package controlplane

import (
	"k8s.io/client-go/rest"

	"rawwatch/faultproxy"
)

// FaultProxy starts a faultproxy.Proxy in front of a. It presents the
// control plane's serving certificate, so a client of a trusts it as it
// trusts a: point the client at the proxy (a.ConfigVia(p.URL), or
// WriteKubeconfigFor(path, p.URL, "")) and change nothing else. Close the
// proxy when done.
func (cp *ControlPlane) FaultProxy(a *APIServer) (*faultproxy.Proxy, error) {
	cert, err := cp.ServingCertificate()
	if err != nil {
		return nil, err
	}
	return faultproxy.New(a.URL, cert, cp.CAPool())
}

// ConfigVia is a's admin rest.Config pointed at server instead (a proxy in
// front of a).
func (a *APIServer) ConfigVia(server string) *rest.Config {
	c := a.Config()
	c.Host = server
	return c
}
