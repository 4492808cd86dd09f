// kube-scheduler of Kubernetes 1.37, as its own main package runs it: built beside the
// API server from the same module (tests/servers/build), so the bridge's tests see the
// real scheduler place pods, honouring the bridge's taints.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
)

func main() {
	os.Exit(cli.Run(app.NewSchedulerCommand()))
}
