//go:build !cordon_testhooks

package linux

// testHooks is false in every production build: Options.TestSkip names
// only the init's layers there, and the init ignores them too.
const testHooks = false
