// Package systemd holds cordon's systemd unit (cordon.service) and the
// test that checks it. It is data for the host's service manager (root
// plane: the unit starts the daemon as root) and has no Go code; it must
// never gain a hardening directive that changes the daemon's mount
// namespace, capabilities or no_new_privs (see the comments in the unit).
package systemd
