package console_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"github.com/pb33f/libopenapi-validator/config"
	"github.com/pb33f/libopenapi-validator/router"
	"github.com/pb33f/libopenapi-validator/schema_validation"
	"github.com/pb33f/libopenapi/datamodel/high/base"
	v3 "github.com/pb33f/libopenapi/datamodel/high/v3"
)

// This file holds the tenant API to its OpenAPI document: every answer an
// API test receives through do (or exchange) is validated against
// openapi.json by libopenapi-validator, and so is the request of every
// answer that succeeded (a request the document calls invalid must not
// succeed).

// openAPISpec is the parsed document, its validator and its router, built
// once for the package's tests.
type openAPISpec struct {
	model     *v3.Document
	validator validator.Validator
	router    router.Router
	errSchema *base.Schema
	doc       libopenapi.Document
}

var (
	specOnce sync.Once
	spec     *openAPISpec
	specErr  error
)

func loadSpec(t testing.TB) *openAPISpec {
	t.Helper()
	specOnce.Do(func() {
		raw, err := os.ReadFile("openapi.json")
		if err != nil {
			specErr = err
			return
		}
		doc, err := libopenapi.NewDocument(raw)
		if err != nil {
			specErr = fmt.Errorf("parse openapi.json: %w", err)
			return
		}
		model, err := doc.BuildV3Model()
		if err != nil {
			specErr = fmt.Errorf("build openapi.json's model: %w", err)
			return
		}
		v, errs := validator.NewValidator(doc, config.WithPathTree(regexRoutesOnly{}))
		if len(errs) > 0 {
			specErr = fmt.Errorf("validator of openapi.json: %v", errs)
			return
		}
		errSchema, ok := model.Model.Components.Schemas.Get("Error")
		if !ok {
			specErr = fmt.Errorf("openapi.json has no Error schema")
			return
		}
		spec = &openAPISpec{model: &model.Model, validator: v, doc: doc,
			router:    router.NewRouter(&model.Model, router.WithPathOnlyMatching(), router.WithPathLookup(regexRoutesOnly{})),
			errSchema: errSchema.Schema()}
	})
	if specErr != nil {
		t.Fatal(specErr)
	}
	return spec
}

// regexRoutesOnly makes the validator match every path template as a
// whole. Its default radix tree matches one segment at a time and takes
// ".../entries/{entry}" for ".../entries/T.1:replay" (a template with text
// after the parameter in its segment, as our ":replay" and ":discard"
// actions are, is not a tree node); the regex matching then picks the
// template that has the request's method.
type regexRoutesOnly struct{}

func (regexRoutesOnly) Lookup(string) (*v3.PathItem, string, bool) { return nil, "", false }

// checkAPI validates one exchange with the API against the document and
// answers which documented answer it was ("listEntries 200"), or "" for a
// path the document does not have, whose answer must be a 404 Error.
// reqBody and respBody are the bodies as sent and received.
func checkAPI(t testing.TB, req *http.Request, reqBody []byte, resp *http.Response, respBody []byte) string {
	t.Helper()
	s := loadSpec(t)
	what := req.Method + " " + req.URL.RequestURI()
	route, err := s.router.FindRoute(req)
	if err != nil || route.Operation == nil {
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("%s: not a route of openapi.json, answered %d, want 404", what, resp.StatusCode)
		}
		if ok, errs := schema_validation.NewSchemaValidator().ValidateSchemaBytes(s.errSchema, respBody); !ok {
			t.Errorf("%s = %d %s: not the document's Error: %s", what, resp.StatusCode, respBody, validationErrors(errs))
		}
		return ""
	}
	resp.Body = io.NopCloser(bytes.NewReader(respBody))
	req.Body = io.NopCloser(bytes.NewReader(reqBody))
	if ok, errs := s.validator.ValidateHttpResponse(req, resp); !ok {
		t.Errorf("%s = %d %s\ndoes not match openapi.json: %s", what, resp.StatusCode, respBody, validationErrors(errs))
	}
	if resp.StatusCode < 300 {
		req.Body = io.NopCloser(bytes.NewReader(reqBody))
		if ok, errs := s.validator.ValidateHttpRequestSync(req); !ok {
			t.Errorf("%s (body %s) succeeded but openapi.json calls the request invalid: %s", what, reqBody, validationErrors(errs))
		}
	}
	return route.Operation.OperationId + " " + strconv.Itoa(resp.StatusCode)
}

func validationErrors[E error](errs []E) string {
	var b strings.Builder
	for _, e := range errs {
		b.WriteString("\n\t" + e.Error())
	}
	return b.String()
}

// exchange is do that also answers which documented answer it got (see
// checkAPI).
func exchange(t testing.TB, method, url, key, body string) (code int, respBody, answer string) {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body == "" {
		req.Body = http.NoBody
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if strings.HasPrefix(req.URL.Path, "/api/") {
		answer = checkAPI(t, req, []byte(body), resp, b)
	}
	return resp.StatusCode, string(b), answer
}
