// The releases whose CustomResourceDefinitions the manifests in docs/deploy/ use:
// tests/crds/fetch copies those files out of these modules (go.sum pins their content).
module blocklistd.test/crds

go 1.26.0

require (
	github.com/cert-manager/cert-manager v1.21.2
	github.com/prometheus-operator/prometheus-operator v0.85.0
)
