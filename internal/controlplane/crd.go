package controlplane

import (
	"context"
	"fmt"
	"os"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"
)

var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// InstallCRDs creates (or updates) the CRDs in the given manifest files and
// waits until each is Established and its resource answers a LIST.
func InstallCRDs(ctx context.Context, cfg *rest.Config, paths ...string) error {
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	for _, path := range paths {
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		crd := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(data, &crd.Object); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		crds := dyn.Resource(crdResource)
		if _, err := crds.Create(ctx, crd, metav1.CreateOptions{}); apierrors.IsAlreadyExists(err) {
			existing, err := crds.Get(ctx, crd.GetName(), metav1.GetOptions{})
			if err != nil {
				return err
			}
			crd.SetResourceVersion(existing.GetResourceVersion())
			if _, err := crds.Update(ctx, crd, metav1.UpdateOptions{}); err != nil {
				return fmt.Errorf("updating CRD %s: %w", crd.GetName(), err)
			}
		} else if err != nil {
			return fmt.Errorf("creating CRD %s: %w", crd.GetName(), err)
		}
		if err := waitServed(ctx, dyn, crd); err != nil {
			return err
		}
	}
	return nil
}

func waitServed(ctx context.Context, dyn dynamic.Interface, crd *unstructured.Unstructured) error {
	group, _, _ := unstructured.NestedString(crd.Object, "spec", "group")
	plural, _, _ := unstructured.NestedString(crd.Object, "spec", "names", "plural")
	versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
	if len(versions) == 0 {
		return fmt.Errorf("CRD %s has no versions", crd.GetName())
	}
	version, _, _ := unstructured.NestedString(versions[0].(map[string]any), "name")
	gvr := schema.GroupVersionResource{Group: group, Version: version, Resource: plural}
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := dyn.Resource(gvr).List(ctx, metav1.ListOptions{Limit: 1})
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("CRD %s not served after 30s: %w", crd.GetName(), err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
