package app

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"k8s.io/klog/v2"
)

// The file names in a certificate directory, as cert-manager and
// kubernetes.io/tls Secrets mount them.
const (
	certFile = "tls.crt"
	keyFile  = "tls.key"
)

// servingTLS is the TLS configuration of the secured endpoints: the pair in
// dir, read again when the files change (a rotated Secret), or without dir
// a self-signed certificate made at start (fine for a Prometheus that
// scrapes with insecure_skip_verify, as kubebuilder's default does; mount a
// real one for anything else).
func servingTLS(log klog.Logger, dir string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"}}
	if dir == "" {
		cert, err := selfSigned()
		if err != nil {
			return nil, fmt.Errorf("making a self-signed serving certificate: %w", err)
		}
		log.Info("Serving with a self-signed certificate (set --tls-cert-dir to use your own)")
		cfg.Certificates = []tls.Certificate{cert}
		return cfg, nil
	}
	r := &certReloader{log: log, cert: filepath.Join(dir, certFile), key: filepath.Join(dir, keyFile), now: time.Now}
	if err := r.load(); err != nil {
		return nil, err
	}
	cfg.GetCertificate = r.get
	return cfg, nil
}

// certReloader serves a key pair from files, reading them again when their
// modification time changes (checked at most every reloadCheck).
type certReloader struct {
	log       klog.Logger
	cert, key string
	now       func() time.Time // time.Now; tests move it

	mu      sync.Mutex
	current *tls.Certificate
	mtimes  [2]time.Time
	checked time.Time
}

const reloadCheck = 10 * time.Second

func (r *certReloader) mtimesNow() ([2]time.Time, error) {
	var m [2]time.Time
	for i, f := range []string{r.cert, r.key} {
		st, err := os.Stat(f)
		if err != nil {
			return m, err
		}
		m[i] = st.ModTime()
	}
	return m, nil
}

func (r *certReloader) load() error {
	m, err := r.mtimesNow()
	if err != nil {
		return fmt.Errorf("serving certificate: %w", err)
	}
	cert, err := tls.LoadX509KeyPair(r.cert, r.key)
	if err != nil {
		return fmt.Errorf("serving certificate: %w", err)
	}
	r.mu.Lock()
	r.current, r.mtimes, r.checked = &cert, m, r.now()
	r.mu.Unlock()
	return nil
}

func (r *certReloader) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.mu.Lock()
	now := r.now()
	due := now.Sub(r.checked) >= reloadCheck
	if due {
		r.checked = now
	}
	cur, old := r.current, r.mtimes
	r.mu.Unlock()
	if due {
		if m, err := r.mtimesNow(); err == nil && m != old {
			if err := r.load(); err != nil {
				r.log.Error(err, "Keeping the serving certificate in use")
			} else {
				r.log.Info("Serving certificate reloaded", "file", r.cert)
				r.mu.Lock()
				cur = r.current
				r.mu.Unlock()
			}
		}
	}
	return cur, nil
}

func selfSigned() (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return tls.Certificate{}, err
	}
	host, _ := os.Hostname()
	names := []string{"localhost"}
	if host != "" {
		names = append(names, host)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "rawwatch"},
		DNSNames:     names,
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}
