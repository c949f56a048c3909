package model

import (
	"path"
	"unicode/utf8"
)

// ValidModelID reports whether the broker accepts id as a request's
// "model": non-empty UTF-8 of at most 256 bytes. For `cordon policy
// explain`, with the same check the guard runs.
func ValidModelID(id string) bool {
	return validModelID([]byte(id))
}

func validModelID(m []byte) bool {
	return len(m) > 0 && len(m) <= maxModelLen && utf8.Valid(m)
}

// RouteFor returns the name of the first route of api ("anthropic",
// "openai"; "" for any) whose model globs allow the model id, as the
// broker picks a route, and whether there is one. For `cordon policy
// explain`: its verdict must be the runtime's.
func RouteFor(routes []Route, api, model string) (string, bool) {
	for _, rt := range routes {
		if api != "" && rt.API != api {
			continue
		}
		if matchModel(rt.Models, model) {
			return rt.Name, true
		}
	}
	return "", false
}

// matchModel reports whether a route's globs allow the model id.
func matchModel(globs []string, model string) bool {
	for _, g := range globs {
		if ok, _ := path.Match(g, model); ok {
			return true
		}
	}
	return false
}
