//go:build cordon_testhooks

package registry_test

const testHooks = true
