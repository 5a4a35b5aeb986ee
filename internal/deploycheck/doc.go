// Package deploycheck holds the tests that what passes locally would pass
// on Google Cloud too, where the local stack cannot tell: every Firestore
// query the code issues has an index that Terraform declares (the emulator
// enforces none), and the function bundle Terraform zips builds and serves
// each function the way Cloud Functions' Go buildpack builds it. Both read
// Terraform's own verdict, an offline plan of terraform/, rather than a
// copy of its values.
package deploycheck
