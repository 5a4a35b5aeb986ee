package console

import (
	_ "embed"
	"net/http"
)

// openAPIDocument is the tenant API's OpenAPI 3.1 description: every
// route, parameter, body, answer and error (docs/console.md, "Wire
// types"). It is written by hand next to the wire types (apiwire.go);
// the tests validate every answer of the real server against it and hold
// its schemas and the wire types to the same fields.
//
//go:embed openapi.json
var openAPIDocument []byte

// serveOpenAPI answers the document without a key: it describes the API
// and holds no data.
func serveOpenAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Write(openAPIDocument)
}
