package ring

import (
	"net/http"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// NewClient is the ring's client of the Lease API, built from c (copied):
// its responses reach client-go without a Retry-After header. client-go
// retries a request answered 429 or 5xx with a Retry-After after that many
// seconds, up to 10 times (rest/with_retry.go) — at once at "Retry-After:
// 0", a storm of 11 requests for each of a round's. The ring retries a
// failed request at its next renew period, never faster, so it takes the
// header out and lets client-go give up at once. (A GET whose connection
// was reset is still retried after client-go's own 1 s, within the round's
// timeout.)
func NewClient(c *rest.Config) (kubernetes.Interface, error) {
	c = rest.CopyConfig(c)
	c.Wrap(func(rt http.RoundTripper) http.RoundTripper { return noRetryAfter{rt} })
	return kubernetes.NewForConfig(c)
}

// noRetryAfter drops the Retry-After header of every response.
type noRetryAfter struct{ next http.RoundTripper }

func (t noRetryAfter) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(r)
	if resp != nil {
		resp.Header.Del("Retry-After")
	}
	return resp, err
}
