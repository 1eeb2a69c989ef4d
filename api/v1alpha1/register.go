package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

const (
	// Group and Version name the API this package serves.
	Group   = "example.com"
	Version = "v1alpha1"
	// Kind and Resource name the custom resource (the resource is the URL path segment).
	Kind     = "MyResource"
	Resource = "myresources"
)

var (
	// SchemeGroupVersion is the group/version these types are registered under.
	SchemeGroupVersion = schema.GroupVersion{Group: Group, Version: Version}
	// GroupVersionKind of MyResource, as written in apiVersion/kind.
	GroupVersionKind = SchemeGroupVersion.WithKind(Kind)
	// GroupVersionResource of MyResource, as used in request paths.
	GroupVersionResource = SchemeGroupVersion.WithResource(Resource)

	// SchemeBuilder registers the types with a runtime.Scheme; AddToScheme applies it.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	AddToScheme   = SchemeBuilder.AddToScheme
)

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(SchemeGroupVersion, &MyResource{}, &MyResourceList{})
	metav1.AddToGroupVersion(scheme, SchemeGroupVersion)
	return nil
}
