// Package oci holds whole-binary tests of cordon as an OCI runtime under
// real engines: a private containerd driven through the CRI API the way
// kubelet drives it (and Docker, in its own files), with the runtime
// handler `cordon` pointing at the cordon-oci name of the binary this
// package builds. Each test observes from outside the container: the
// host's /proc, cordon's state and store, the engine's answers; runc is
// the harness's positive control.
package oci
