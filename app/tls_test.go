package app

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/klog/v2"
)

// A rotated certificate (a Secret updated by cert-manager) is served after
// the next check; a broken one is not, the old one stays.
func TestServingCertificateIsReloadedWhenItChanges(t *testing.T) {
	dir := t.TempDir()
	write := func(c tls.Certificate, at time.Time) {
		t.Helper()
		keyDER, err := x509.MarshalECPrivateKey(c.PrivateKey.(*ecdsa.PrivateKey))
		if err != nil {
			t.Fatal(err)
		}
		for name, data := range map[string][]byte{
			certFile: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Certificate[0]}),
			keyFile:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
		} {
			f := filepath.Join(dir, name)
			if err := os.WriteFile(f, data, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chtimes(f, at, at); err != nil {
				t.Fatal(err)
			}
		}
	}
	first, _ := selfSigned()
	second, _ := selfSigned()
	write(first, time.Now().Add(-time.Hour))
	now := time.Now()
	r := &certReloader{log: klog.Background(), cert: filepath.Join(dir, certFile), key: filepath.Join(dir, keyFile),
		now: func() time.Time { return now }}
	if err := r.load(); err != nil {
		t.Fatal(err)
	}
	serving := func() []byte {
		c, err := r.get(nil)
		if err != nil {
			t.Fatal(err)
		}
		return c.Certificate[0]
	}
	if !bytes.Equal(serving(), first.Certificate[0]) {
		t.Fatal("not serving the certificate in the directory")
	}
	write(second, time.Now())
	if !bytes.Equal(serving(), first.Certificate[0]) {
		t.Fatal("reloaded before the next check was due")
	}
	backdate := func() { now = now.Add(reloadCheck) }
	backdate()
	if !bytes.Equal(serving(), second.Certificate[0]) {
		t.Fatal("the rotated certificate is not served after the check")
	}
	if err := os.WriteFile(filepath.Join(dir, certFile), []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	backdate()
	if !bytes.Equal(serving(), second.Certificate[0]) {
		t.Fatal("a broken certificate file replaced the one in use")
	}
	if _, err := servingTLS(klog.Background(), t.TempDir()); err == nil {
		t.Fatal("an empty certificate directory was accepted")
	}
}
