// Package doccheck holds the tests of what the repository tells its
// readers: the code, the files it ships and docs/ stand alone, citing only
// what a user of the repository can open.
package doccheck
