// Package config loads the file given to `cordon run --config`: which
// workload runs, for which tenant and purpose, which hosts it may reach,
// which model upstreams it may call with which custodied credential, its
// budgets and request limits, and where each secret comes from.
//
// It owns the schema (documented on each field here and in docs/config.md)
// and its validation. Parsing is strict: unknown keys, duplicate keys,
// aliases, floats where integers belong and several documents in one file
// are errors that name the line and column. Parse and Load are the only
// constructors, and they return a Config only when every field is valid;
// Check (`cordon config check`) is the same checker returning the list of
// every problem, so the two can never disagree.
//
// Plane: root and CLI (`cordon run --config` parses the file as root;
// `cordon sandbox create --config` parses it as the calling user, and the
// daemon parses the bytes it is sent again). The unprivileged gateway
// process never reads a configuration file: it is handed what each broker
// needs.
//
// It must never resolve a secret value: a Config names where each secret
// lives (an environment variable or a file of the trusted side) and package
// custody reads it. Errors quote the file's contents except under secrets:
// and in a model's credential, where a user may have pasted a value instead
// of a reference. CheckLeaks, which compares resolved values, must never
// print one.
package config
