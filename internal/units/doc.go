// Package units is cordon's one grammar for byte sizes: the same text
// means the same number of bytes on the command line (`--memory 2.5G`)
// and in a configuration file (`memory: 2.5G`).
//
// Grammar (case-insensitive, surrounding blanks ignored):
//
//	size   = number [ " "* unit ]
//	number = digits [ "." digits ]        ASCII digits; no sign, no exponent, no "_"
//	unit   = "B" | prefix [ "B" | "i" | "iB" ]
//	prefix = "K" | "M" | "G" | "T"          1024, 1024², 1024³, 1024⁴
//
// Units are 1024-based whatever their spelling: 512M = 512MiB = 512MB =
// 536870912. A fraction needs a prefix (1.5G; not 1.5 or 1.5B) and the
// result is rounded down to a whole byte (1.1K = 1126). The largest size
// is 4EiB (2⁶² bytes). Anything else is an *Error of kind usage that
// quotes the text and states the grammar.
//
// Plane: root, CLI (a leaf: package config parses sizes as root for
// `cordon run` and the daemon, the command line parses flags). It must
// never accept a negative, fractional-byte or overflowing size, and never
// depend on another cordon package but failure.
package units
