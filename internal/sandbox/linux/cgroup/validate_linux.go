package cgroup

// Validate checks limits before anything is created (Create checks again).
func (lim Limits) Validate() error { return lim.validate() }
