package compare

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

const metricsText = `# HELP process_resident_memory_bytes Resident memory size in bytes.
# TYPE process_resident_memory_bytes gauge
process_resident_memory_bytes 1.2345e+08
# TYPE go_memstats_heap_inuse_bytes gauge
go_memstats_heap_inuse_bytes 6.5e+07
# TYPE process_cpu_seconds_total counter
process_cpu_seconds_total 12.5
# TYPE apiserver_request_total counter
apiserver_request_total{code="200",resource="myresources",verb="LIST"} 40
apiserver_request_total{code="429",resource="myresources",verb="LIST"} 7
apiserver_request_total{code="201",resource="myresources",verb="POST"} 3
# TYPE apiserver_longrunning_requests gauge
apiserver_longrunning_requests{component="apiserver",resource="myresources",scope="namespace",verb="WATCH"} 12
apiserver_longrunning_requests{component="apiserver",resource="pods",scope="cluster",verb="WATCH"} 3
apiserver_longrunning_requests{component="apiserver",resource="pods",scope="namespace",subresource="exec",verb="CONNECT"} 2
# TYPE apiserver_request_total_other counter
apiserver_request_total_other{code="429"} 1000
# TYPE apiserver_request_duration_seconds histogram
apiserver_request_duration_seconds_bucket{le="+Inf"} 9
`

func TestParseAPIServerMetrics(t *testing.T) {
	s, err := parseAPIServerMetrics(strings.NewReader(metricsText))
	if err != nil {
		t.Fatal(err)
	}
	if s.RSS != 1.2345e8 || s.HeapInuse != 6.5e7 || s.CPUSeconds != 12.5 || s.Requests != 50 || s.Throttled != 7 || s.Watches != 15 {
		t.Fatalf("parsed %+v", s)
	}
	if _, err := parseAPIServerMetrics(strings.NewReader("process_resident_memory_bytes{ 1\n")); err == nil {
		t.Fatal("malformed text parsed without error")
	}
}

func TestByteCounter(t *testing.T) {
	body := strings.Repeat("x", 10_000)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, body) }))
	defer srv.Close()
	var c ByteCounter
	client := &http.Client{Transport: c.Wrap(http.DefaultTransport)}
	for range 3 {
		resp, err := client.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	if c.Read() != 30_000 || c.Requests() != 3 {
		t.Fatalf("read %d bytes in %d requests, want 30000 in 3", c.Read(), c.Requests())
	}
}

func TestRequestName(t *testing.T) {
	for url, want := range map[string]string{
		"GET /apis/example.com/v1alpha1/namespaces/ns/myresources?limit=500":         "LIST myresources",
		"GET /apis/example.com/v1alpha1/namespaces/ns/myresources?watch=true":        "WATCH myresources",
		"PUT /apis/example.com/v1alpha1/namespaces/ns/myresources/obj-000001/status": "PUT myresources/status",
		"POST /api/v1/namespaces/ns/events":                                          "POST events",
		"PATCH /api/v1/namespaces/ns/events/obj.1234":                                "PATCH events",
		"POST /apis/authentication.k8s.io/v1/selfsubjectreviews":                     "POST selfsubjectreviews",
		"GET /apis/example.com/v1alpha1/namespaces/ns/myresources/obj-000001":        "GET myresources",
	} {
		method, path, _ := strings.Cut(url, " ")
		req, err := http.NewRequest(method, "https://server"+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := requestName(req); got != want {
			t.Errorf("%s: %q, want %q", url, got, want)
		}
	}
}
