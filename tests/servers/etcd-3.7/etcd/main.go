// etcd 3.7's server, as its own main package does it: the test harness builds this
// module into target/servers/ (tests/servers/build), so the tests run the release
// operators run without a binary in the tree.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
