package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"rawwatch/api/v1alpha1"
	"rawwatch/internal/testkit"
)

// The CRD's OpenAPI schema (generated from the Go markers) rejects bad input
// at the API server, before any controller sees it.
func TestSchemaRejectsInvalidMyResources(t *testing.T) {
	t.Parallel()
	cp := shared.Get(t)
	ns := testkit.Namespace(t, cp.Config())
	c := testkit.Client(t, cp.Config())
	ctx := context.Background()
	cases := map[string]*v1alpha1.MyResource{
		"empty message":    testkit.New(ns, "empty", ""),
		"message too long": testkit.New(ns, "long", strings.Repeat("x", 257)),
	}
	for name, obj := range cases {
		_, err := c.Create(ctx, obj)
		if !apierrors.IsInvalid(err) {
			t.Errorf("%s: got %v, want 422 Invalid", name, err)
		}
	}
	// A missing spec, as raw JSON (the Go type would always send one).
	raw := `{"apiVersion":"example.com/v1alpha1","kind":"MyResource","metadata":{"name":"nospec"}}`
	err := c.REST().Post().Namespace(ns).Resource(v1alpha1.Resource).Body([]byte(raw)).
		SetHeader("Content-Type", "application/json").Do(ctx).Error()
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec") {
		t.Errorf("missing spec: got %v, want 422 naming spec", err)
	}
	// A status phase outside the enum is refused through /status too.
	ok, err := c.Create(ctx, testkit.New(ns, "ok", "fine"))
	if err != nil {
		t.Fatal(err)
	}
	ok.Status.Phase = "Exploded"
	if _, err := c.UpdateStatus(ctx, ok); !apierrors.IsInvalid(err) {
		t.Errorf("bad phase: got %v, want 422", err)
	}
}

// kubectl get shows PHASE, MESSAGE and AGE: the server's Table view lists them.
func TestPrinterColumns(t *testing.T) {
	t.Parallel()
	cp := shared.Get(t)
	ns := testkit.Namespace(t, cp.Config())
	c := testkit.Client(t, cp.Config())
	if _, err := c.Create(context.Background(), testkit.New(ns, "cols", "x")); err != nil {
		t.Fatal(err)
	}
	body, err := c.REST().Get().Namespace(ns).Resource(v1alpha1.Resource).
		SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").Do(context.Background()).Raw()
	if err != nil {
		t.Fatal(err)
	}
	var table metav1.Table
	if err := json.Unmarshal(body, &table); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, col := range table.ColumnDefinitions {
		names = append(names, strings.ToUpper(col.Name))
	}
	if got := strings.Join(names, ","); got != "NAME,PHASE,MESSAGE,AGE" {
		t.Errorf("columns = %s, want NAME,PHASE,MESSAGE,AGE", got)
	}
}
