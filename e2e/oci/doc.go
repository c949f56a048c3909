// Package oci holds whole-binary tests of cordon as an OCI runtime under
// real engines: a private dockerd (and containerd's CRI plugin) with the
// cordon binary registered as the runtime `cordon` through its cordon-oci
// name. The tests start, exec, stop and remove containers through the
// engine, read each container's evidence and state from the host, attempt
// escapes from inside with the binary's probe ops, and kill the engine's
// shim or cordon's keeper to look for residue. Each harness check runs
// with runc too, as the control that the harness itself works.
package oci
