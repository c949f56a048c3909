package record

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
)

// Change is one difference between a logged document and a given one.
type Change struct {
	// Path is where it is: a JSON path ("$.payload.predicate.probes[2].verdict"),
	// with "@byte N" when the given document is not JSON there.
	Path   string `json:"path"`
	Logged string `json:"logged"` // compact JSON, or "(absent)"
	Given  string `json:"given"`
}

// maxChanges bounds a diff's length.
const maxChanges = 64

// DiffEnvelopes compares a given envelope file with the logged copy,
// descending into the base64 payload so a change inside the signed
// statement is named by its JSON path. nil means byte-identical.
func DiffEnvelopes(logged, given []byte) []Change {
	if bytes.Equal(logged, given) {
		return nil
	}
	var l, g map[string]any
	if json.Unmarshal(logged, &l) != nil || json.Unmarshal(given, &g) != nil {
		return []Change{byteChange("$", logged, given)}
	}
	var out []Change
	lp, lok := l["payload"].(string)
	gp, gok := g["payload"].(string)
	if lok && gok && lp != gp {
		delete(l, "payload")
		delete(g, "payload")
		out = append(out, diffPayload(lp, gp)...)
	}
	out = append(out, diffValues("$", l, g)...)
	if len(out) == 0 { // same JSON value, different bytes (spacing, escapes, field order)
		out = append(out, byteChange("$", logged, given))
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return cap64(out)
}

// diffPayload compares two base64 payloads by their decoded JSON.
func diffPayload(lp, gp string) []Change {
	lb, err1 := base64.StdEncoding.Strict().DecodeString(lp)
	gb, err2 := base64.StdEncoding.Strict().DecodeString(gp)
	if err1 != nil || err2 != nil {
		c := byteChange("$.payload", []byte(lp), []byte(gp))
		if err2 != nil {
			c.Path += " (not standard base64)"
		}
		if err1 == nil {
			// Name the statement field the changed base64 covers.
			n := firstDiff([]byte(lp), []byte(gp)) / 4 * 3
			c.Path += " in " + PathAt(lb, n, "$.payload")
		}
		return []Change{c}
	}
	return DiffJSON("$.payload", lb, gb)
}

// DiffJSON compares two JSON documents by value; path prefixes each path.
func DiffJSON(path string, logged, given []byte) []Change {
	var l, g any
	if err := unmarshalNumber(logged, &l); err != nil {
		return []Change{{Path: path, Logged: "(not JSON)", Given: clip(string(given))}}
	}
	if err := unmarshalNumber(given, &g); err != nil {
		c := byteChange(path, logged, given)
		c.Path = PathAt(logged, firstDiff(logged, given), path) + fmt.Sprintf(" @byte %d (not JSON: %v)", firstDiff(logged, given), err)
		return []Change{c}
	}
	out := diffValues(path, l, g)
	if len(out) == 0 && !bytes.Equal(logged, given) {
		out = append(out, byteChange(path, logged, given))
	}
	return cap64(out)
}

func unmarshalNumber(b []byte, v *any) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	if err := d.Decode(v); err != nil {
		return err
	}
	if d.More() {
		return fmt.Errorf("data after the JSON value")
	}
	return nil
}

func diffValues(path string, l, g any) []Change {
	switch lv := l.(type) {
	case map[string]any:
		gv, ok := g.(map[string]any)
		if !ok {
			break
		}
		keys := map[string]bool{}
		for k := range lv {
			keys[k] = true
		}
		for k := range gv {
			keys[k] = true
		}
		ks := make([]string, 0, len(keys))
		for k := range keys {
			ks = append(ks, k)
		}
		sort.Strings(ks)
		var out []Change
		for _, k := range ks {
			p := path + key(k)
			a, aok := lv[k]
			b, bok := gv[k]
			switch {
			case !aok:
				out = append(out, Change{Path: p, Logged: "(absent)", Given: render(b)})
			case !bok:
				out = append(out, Change{Path: p, Logged: render(a), Given: "(absent)"})
			default:
				out = append(out, diffValues(p, a, b)...)
			}
			if len(out) >= maxChanges {
				return out
			}
		}
		return out
	case []any:
		gv, ok := g.([]any)
		if !ok {
			break
		}
		var out []Change
		for i := 0; i < max(len(lv), len(gv)) && len(out) < maxChanges; i++ {
			p := fmt.Sprintf("%s[%d]", path, i)
			switch {
			case i >= len(lv):
				out = append(out, Change{Path: p, Logged: "(absent)", Given: render(gv[i])})
			case i >= len(gv):
				out = append(out, Change{Path: p, Logged: render(lv[i]), Given: "(absent)"})
			default:
				out = append(out, diffValues(p, lv[i], gv[i])...)
			}
		}
		return out
	}
	if render(l) != render(g) {
		return []Change{{Path: path, Logged: render(l), Given: render(g)}}
	}
	return nil
}

var ident = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

func key(k string) string {
	if ident.MatchString(k) {
		return "." + k
	}
	b, _ := json.Marshal(k)
	return "[" + string(b) + "]"
}

func render(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return clip(string(b))
}

func clip(s string) string {
	if len(s) > 160 {
		return s[:160] + "…"
	}
	return s
}

func cap64(cs []Change) []Change {
	if len(cs) > maxChanges {
		return append(cs[:maxChanges], Change{Path: "…", Logged: "more changes not shown", Given: ""})
	}
	return cs
}

// firstDiff is the offset of the first byte where a and b differ.
func firstDiff(a, b []byte) int {
	n := min(len(a), len(b))
	for i := 0; i < n; i++ {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

// byteChange names the first differing byte and the bytes around it.
func byteChange(path string, logged, given []byte) Change {
	i := firstDiff(logged, given)
	around := func(b []byte) string {
		lo, hi := max(0, i-16), min(len(b), i+16)
		return fmt.Sprintf("%q", b[lo:hi])
	}
	return Change{Path: fmt.Sprintf("%s @byte %d", PathAt(logged, i, path), i), Logged: around(logged), Given: around(given)}
}

// PathAt is the JSON path (under prefix) of the innermost value or key of
// doc that holds byte off; prefix alone when doc is not JSON there.
func PathAt(doc []byte, off int, prefix string) string {
	type frame struct {
		obj, hasKey, wantKey bool
		key                  string
		idx                  int
	}
	var st []frame
	path := func() string {
		p := prefix
		for _, f := range st {
			switch {
			case f.obj && f.hasKey:
				p += key(f.key)
			case !f.obj:
				p += fmt.Sprintf("[%d]", f.idx)
			}
		}
		return p
	}
	advance := func() {
		if len(st) > 0 {
			if t := &st[len(st)-1]; t.obj {
				t.wantKey = true
			} else {
				t.idx++
			}
		}
	}
	d := json.NewDecoder(bytes.NewReader(doc))
	for {
		tok, err := d.Token()
		if err != nil {
			return path()
		}
		end := int(d.InputOffset())
		switch t := tok.(type) {
		case json.Delim:
			if t == '{' || t == '[' {
				if end > off {
					return path()
				}
				st = append(st, frame{obj: t == '{', wantKey: t == '{'})
				continue
			}
			if end > off {
				if t := &st[len(st)-1]; t.obj {
					t.hasKey = false
				} else {
					t.idx = max(0, t.idx-1)
				}
				return path()
			}
			st = st[:len(st)-1]
			advance()
		default:
			if n := len(st); n > 0 && st[n-1].obj && st[n-1].wantKey {
				st[n-1].key, st[n-1].hasKey, st[n-1].wantKey = fmt.Sprint(t), true, false
				if end > off {
					return path()
				}
				continue
			}
			if end > off {
				return path()
			}
			advance()
		}
	}
}
