// Package oci is cordon as an OCI runtime: it reads an OCI bundle's
// config.json and maps it onto a sandbox.Spec for the provider seam —
// honouring what maps onto cordon's boundary, recording what it does not
// grant, refusing what it cannot make safe with an error naming the field
// — and keeps each container's state under the engine's runtime root
// (docs/oci.md).
//
// Plane: root and CLI. `cordon oci` runs as root on the host, called by a
// container engine; its keeper is the container's trusted side.
//
// It must never honour a field it cannot make safe (a host namespace, a
// device, writable sysfs, unmasked kernel paths, seccomp disabled) nor
// ignore one silently: every field not honoured is named in the state's
// annotations and the evidence log. It must never take the gateway's
// configuration from the bundle or the image: the bundle only names a
// configuration the host operator placed in the operator's directory.
package oci
