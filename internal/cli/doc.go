// Package cli is cordon's command line: flag parsing, validation before
// anything is created, the run lifecycle, exit statuses and output. It
// wires the provider, the store and the evidence record together.
//
// It must never pass a shell string to anything (argv only), never let the
// host environment reach the sandbox, and never exit 0 for a program that
// did not run admitted at the requested level.
package cli
