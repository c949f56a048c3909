// Package report renders a conformance record as one self-contained HTML
// page: the claim, the matrix class × clause × probe × verdict with the
// facts the trusted side observed, the bindings, the host, and the TCB,
// assumptions and non-claims.
//
// Plane: CLI (`cordon conformance report`, the runner's --html). Every
// string of a record may come from a sandbox (a fact's Got, a hint) or
// from whoever handed the record in: it is rendered only through
// html/template's contextual escaping after textsafe.Line (controls and
// bidi overrides become visible escapes). It must never use template.HTML
// (or any other trusted-content type) over record data, never load
// anything from outside the page (no external CSS, scripts, fonts or
// images; a Content-Security-Policy forbids them), and never contain a
// script.
package report
