package faultproxy

import (
	"net/http"
	"net/url"
	"testing"
)

// A WATCH is sorted as kube-apiserver sorts it (its RequestInfoFactory): a
// GET of a collection whose watch parameter is anything but "0" or "false"
// (in any case), or a GET under the /watch/ prefix; a LIST is a GET of a
// collection; anything else is Other.
func TestKindOfSortsEverySpellingAsKubeAPIServerDoes(t *testing.T) {
	for _, c := range []struct {
		method, url string
		want        Kind
	}{
		{"GET", "/apis/example.com/v1alpha1/namespaces/ns/myresources?watch=true&resourceVersion=5", Watch},
		{"GET", "/apis/example.com/v1alpha1/namespaces/ns/myresources?watch=1", Watch},
		{"GET", "/apis/example.com/v1alpha1/namespaces/ns/myresources?watch=True", Watch},
		{"GET", "/apis/example.com/v1alpha1/namespaces/ns/myresources?watch=yes", Watch},
		{"GET", "/apis/example.com/v1alpha1/watch/namespaces/ns/myresources", Watch},
		{"GET", "/apis/example.com/v1alpha1/watch/myresources", Watch},
		{"GET", "/apis/example.com/v1alpha1/watch/namespaces/ns/myresources/obj-001", Watch},
		{"GET", "/api/v1/watch/namespaces/ns/configmaps", Watch},
		{"GET", "/api/v1/namespaces/ns/configmaps?watch=true", Watch},
		{"GET", "/apis/example.com/v1alpha1/namespaces/ns/myresources?watch=false", List},
		{"GET", "/apis/example.com/v1alpha1/namespaces/ns/myresources?watch=FALSE", List},
		{"GET", "/apis/example.com/v1alpha1/namespaces/ns/myresources?watch=0", List},
		{"GET", "/apis/example.com/v1alpha1/namespaces/ns/myresources?limit=500&continue=abc", List},
		{"GET", "/apis/example.com/v1alpha1/myresources", List},
		{"GET", "/api/v1/namespaces", List},
		{"GET", "/api/v1/namespaces/ns/configmaps", List},
		{"GET", "/apis/example.com/v1alpha1/namespaces/ns/myresources/obj-001", Other},
		{"GET", "/apis/example.com/v1alpha1/namespaces/ns/myresources/obj-001?watch=true", Other},
		{"GET", "/apis/example.com/v1alpha1/namespaces/ns/myresources/obj-001/status", Other},
		{"GET", "/api/v1/namespaces/ns", Other},
		{"GET", "/apis", Other},
		{"GET", "/apis/example.com/v1alpha1", Other},
		{"GET", "/api/v1", Other},
		{"GET", "/version", Other},
		{"GET", "/openapi/v3", Other},
		{"PUT", "/apis/example.com/v1alpha1/namespaces/ns/myresources/obj-001", Other},
		{"DELETE", "/apis/example.com/v1alpha1/namespaces/ns/myresources?watch=true", Other},
	} {
		u, err := url.Parse(c.url)
		if err != nil {
			t.Fatal(err)
		}
		if got := KindOf(&http.Request{Method: c.method, URL: u}); got != c.want {
			t.Errorf("%s %s: %s, want %s", c.method, c.url, got, c.want)
		}
	}
}
