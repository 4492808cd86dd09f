// kube-apiserver of Kubernetes 1.37, as its own main package runs it: the test harness
// builds this module into target/servers/ (tests/servers/build), so the bridge's tests
// run against the real API server without a binary in the tree.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() {
	os.Exit(cli.Run(app.NewAPIServerCommand()))
}
