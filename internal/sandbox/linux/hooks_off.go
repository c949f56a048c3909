//go:build !cordon_testhooks

package linux

// testHooks is false in every production build: Options.TestSkip is only
// passed to the init, which ignores it too.
const testHooks = false
