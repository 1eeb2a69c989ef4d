package node

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// nodeCerts are the client certificates of the kubelet's two connections,
// as a cluster's are: the kubelet to the apiserver as system:node:NAME
// (group system:nodes: the Node authorizer and NodeRestriction admission
// judge it), and the apiserver to the kubelet (logs, exec) as a member of
// system:masters; both signed by one CA that the apiserver and the kubelet
// trust for clients.
type nodeCerts struct {
	ca                          string
	kubeletCert, kubeletKey     string
	apiserverCert, apiserverKey string
}

func writeNodeCerts(dir string) (*nodeCerts, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	c := &nodeCerts{
		ca:            filepath.Join(dir, "client-ca.crt"),
		kubeletCert:   filepath.Join(dir, "kubelet-client.crt"),
		kubeletKey:    filepath.Join(dir, "kubelet-client.key"),
		apiserverCert: filepath.Join(dir, "apiserver-kubelet-client.crt"),
		apiserverKey:  filepath.Join(dir, "apiserver-kubelet-client.key"),
	}
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "rawwatch-node-client-ca"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(7 * 24 * time.Hour),
		KeyUsage: x509.KeyUsageCertSign, IsCA: true, BasicConstraintsValid: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	if err := writePEM(c.ca, "CERTIFICATE", caDER); err != nil {
		return nil, err
	}
	for i, client := range []struct {
		cn, org   string
		cert, key string
	}{
		{"system:node:" + NodeName, "system:nodes", c.kubeletCert, c.kubeletKey},
		{"kube-apiserver-kubelet-client", "system:masters", c.apiserverCert, c.apiserverKey},
	} {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, err
		}
		der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{
			SerialNumber: big.NewInt(int64(i + 2)), Subject: pkix.Name{CommonName: client.cn, Organization: []string{client.org}},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(7 * 24 * time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		}, caTmpl, &key.PublicKey, caKey)
		if err != nil {
			return nil, err
		}
		keyDER, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			return nil, err
		}
		if err := writePEM(client.cert, "CERTIFICATE", der); err != nil {
			return nil, err
		}
		if err := writePEM(client.key, "EC PRIVATE KEY", keyDER); err != nil {
			return nil, err
		}
	}
	return c, nil
}

func writePEM(path, typ string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}

// writeKubeletKubeconfig writes the kubelet's kubeconfig: the apiserver at
// server, verified with the control plane's CA, and the kubelet's client
// certificate.
func (c *nodeCerts) writeKubeletKubeconfig(path, server, serverCA string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["node"] = &clientcmdapi.Cluster{Server: server, CertificateAuthority: serverCA}
	cfg.AuthInfos["kubelet"] = &clientcmdapi.AuthInfo{ClientCertificate: c.kubeletCert, ClientKey: c.kubeletKey}
	cfg.Contexts["node"] = &clientcmdapi.Context{Cluster: "node", AuthInfo: "kubelet"}
	cfg.CurrentContext = "node"
	return clientcmd.WriteToFile(*cfg, path)
}
