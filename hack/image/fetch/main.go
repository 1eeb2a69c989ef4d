// Command fetch is what a scraper in another pod does: GET a URL with the
// pod's ServiceAccount token as its bearer token, and print the status
// line and the body. The controller's /metrics certificate is self-signed
// unless one is mounted, so it is not verified (as a Prometheus scrape
// config with insecure_skip_verify does); the token is what is checked.
//
//	fetch https://10.0.0.12:8443/metrics
package main

import (
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"
)

const tokenFile = "/var/run/secrets/kubernetes.io/serviceaccount/token"

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: fetch URL")
		os.Exit(2)
	}
	token, err := os.ReadFile(tokenFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fetch:", err)
		os.Exit(1)
	}
	req, err := http.NewRequest(http.MethodGet, os.Args[1], nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fetch:", err)
		os.Exit(1)
	}
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	c := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	resp, err := c.Do(req)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fetch:", err)
		os.Exit(1)
	}
	defer resp.Body.Close()
	fmt.Printf("status %d\n", resp.StatusCode)
	_, _ = io.Copy(os.Stdout, resp.Body)
}
