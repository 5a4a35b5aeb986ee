package store

import (
	"context"
)

// The deployment's own description: documents Terraform writes once the
// services exist (terraform/webhooks.tf) and jsdlq only reads. They hold
// what no service's environment can: a Cloud Run service cannot be told
// its own generated URL before it exists.
const (
	// Deployment is their collection.
	Deployment = "jsdlq-deployment"
	// OwnURLsDoc is the document of jsdlq's own URLs: {"urls": [...]},
	// every function's and console service's URL as the platform made
	// them. The webhook guard refuses them as endpoints.
	OwnURLsDoc = "own-urls"
)

// OwnURLs returns jsdlq's own URLs as the deployment wrote them; none (and
// no error) when there is no such document: the local stack, or a
// deployment whose services do not exist yet. It is a
// webhook.OwnURLSource.
func (s *Store) OwnURLs(ctx context.Context) ([]string, error) {
	var doc struct {
		URLs []string `firestore:"urls"`
	}
	if _, err := readOptional(ctx, s, s.fs.Collection(Deployment).Doc(OwnURLsDoc), &doc); err != nil {
		return nil, err
	}
	return doc.URLs, nil
}
