package textsafe

import "unicode/utf8"

// AppendJSONString appends s as a JSON string: quotes, backslashes and
// control characters escaped, other bytes as they are (no HTML escaping),
// invalid UTF-8 as \ufffd. It is the one JSON string writer for text cordon
// builds by hand (the model broker's error bodies, the redactor's spelling
// of a secret as such an encoder writes it).
func AppendJSONString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				dst = append(dst, '\\', c)
			case c < 0x20:
				dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			default:
				dst = append(dst, c)
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			dst = append(dst, `\ufffd`...)
		} else {
			dst = append(dst, s[i:i+n]...)
		}
		i += n
	}
	return append(dst, '"')
}
