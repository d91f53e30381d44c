package yamlnode

import (
	"strconv"
	"strings"
)

// JoinPath names key inside path ("resolver" + "interval" →
// "resolver.interval"), as error messages and position maps spell a
// setting.
func JoinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// MapPath names a map entry; keys that would be ambiguous in a path (dots
// in event types, brackets, quotes, spaces, the empty key) are quoted.
func MapPath(path, key string) string {
	if key != "" && !strings.ContainsAny(key, ".[]\" ") {
		return JoinPath(path, key)
	}
	return path + "[" + strconv.Quote(key) + "]"
}

// Truncate shortens s to at most n bytes and marks the cut, for quoting a
// value the user wrote in an error message; the cut never splits a UTF-8
// sequence.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && s[n]&0xc0 == 0x80 { // not inside a UTF-8 sequence
		n--
	}
	return s[:n] + "…"
}
