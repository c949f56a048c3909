//go:build !cordon_testhooks

package sbinit

// testHooks is false in every production build: Config.TestSkip is ignored.
const testHooks = false
