// Package unitstest holds the one table of sizes that every parser of a
// size is tested against: package units itself, a configuration file
// (package config) and the command line (package cli), so the same text
// gives the same answer at every call site.
//
// Plane: test-only. It must never be imported by non-test code.
package unitstest
