// Package v1alpha1 holds the MyResource API (group example.com, version v1alpha1).
//
// The Go types here are the single source of truth: controller-gen reads their
// markers to generate the DeepCopy methods (zz_generated.deepcopy.go) and the
// CRD manifest under config/crd (run `make manifests`).
//
// +kubebuilder:object:generate=true
// +groupName=example.com
package v1alpha1
