package main

import (
	"strconv"
	"strings"
	"unicode"
)

// shown is an object key (or any name a client chose) as the tools print it
// in a table: as it is while every character prints, Go-quoted otherwise.
// Anyone who may write a key chooses its bytes, and a key's escape sequence
// printed raw would act on the operator's terminal (rewrite or erase the
// lines around it); a tab or newline would break the table. JSON output
// escapes them itself.
func shown(s string) string {
	if strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) && r != ' ' }) < 0 {
		return s
	}
	return strconv.Quote(s)
}
