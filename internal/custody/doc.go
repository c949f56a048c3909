// Package custody is the secret custodian and the one redactor.
//
// The custodian resolves every secret a configuration names, once, at
// start, from the trusted side's environment or from a file of the trusted
// side, and hands a value only to a broker that asks for it by name
// (crossing.Secrets). The redactor (Redactor, and Stream and Writer for
// pieces) replaces every custodied value with "[REDACTED]" — raw and in
// the spellings a JSON encoder may give it — in whole buffers and in
// streams, including a value split across writes (an SSE stream cut
// anywhere). Every broker, receipt and log that redacts uses it.
//
// Plane: root, CLI and unprivileged (the custodian resolves values on the
// trusted side — in `cordon run`, or in `cordon sandbox create` as the
// calling user, who sends them to the daemon; the redactor also runs in
// the gateway process, over the values its brokers were handed).
//
// It must never put a value in an error, a String, GoString or Format
// result, a log record or JSON: Value, Custodian, Redactor and Stream
// print as "[REDACTED]", by name or by count only, and errors name the
// secret and its source, never the value. It must never resolve a secret
// from anything the sandbox controls.
//
// Caveats. Redaction matches the bytes of a value and every JSON spelling
// of it (any mix of raw characters, \uXXXX in either case of hex and the
// short escapes, as .NET, Jackson, Python, PHP and Go write them): other
// encodings (base64, URL escaping) are not recognised; a
// fragment of a value is not redacted; values shorter than MinLen cannot
// be redacted without mangling ordinary text and are refused at Load. A
// value containing '[' or ']' may, next to a replacement, re-form itself
// partly out of the literal "[REDACTED]"; only bytes already present in
// the input appear.
package custody
