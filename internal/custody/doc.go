// Package custody is the secret custodian and the redactor.
//
// The custodian resolves every secret a configuration names, once, at
// start, from the trusted side's environment or from a file of the trusted
// side, and hands a value only to a broker that asks for it by name
// (crossing.Secrets). The redactor replaces every custodied value with
// "[REDACTED]" in whole buffers and in streams, including a value split
// across writes (an SSE stream cut anywhere).
//
// Plane: root, CLI and unprivileged (the custodian resolves values on the
// trusted side — in `cordon run`, or in `cordon sandbox create` as the
// calling user, who sends them to the daemon; the redactor also runs in
// the gateway process, over the values its brokers were handed).
//
// It must never put a value in an error, a String, GoString or Format
// result, a log record or JSON: Value and Custodian print as "[REDACTED]"
// or by name only, and errors name the secret and its source, never the
// value. It must never resolve a secret from anything the sandbox controls.
//
// Caveats. Redaction matches the exact bytes of a value: an encoded form
// (base64, JSON or URL escaping) is not recognised; a fragment of a value is
// not redacted; values shorter than MinLen cannot be redacted without
// mangling ordinary text and are refused at Load. A value containing '['
// or ']' may, next to a replacement, re-form itself partly out of the
// literal "[REDACTED]"; only bytes already present in the input appear.
package custody
