// Package browser starts headless Chromium for the tests that check, in
// a real browser, that hostile text in cordon's web pages (the approval
// console, the conformance report) is shown and never run.
//
// Plane: test-only. It must never be imported by non-test code; it is a
// package of its own so that only browser tests link chromedp.
package browser
