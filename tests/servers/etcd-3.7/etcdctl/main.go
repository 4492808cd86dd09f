// etcdctl of etcd 3.7, the client the test harness drives its members with.
package main

import "go.etcd.io/etcd/etcdctl/v3/ctlv3"

func main() {
	ctlv3.MustStart()
}
