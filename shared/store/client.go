package store

import (
	"context"
	"fmt"

	"cloud.google.com/go/firestore"
)

// Client is the Firestore client a Store works through. Callers build it
// with Open, share it between the stores and kits of one process and close
// it; only this package reads or writes documents with it
// (internal/depcheck holds that).
type Client = firestore.Client

// Open returns a client for project's default database: the emulator's when
// FIRESTORE_EMULATOR_HOST is set (the client library reads it). Nothing
// connects before the first call.
func Open(ctx context.Context, project string) (*Client, error) {
	c, err := firestore.NewClient(ctx, project)
	if err != nil {
		return nil, fmt.Errorf("firestore client for project %s: %w", project, err)
	}
	return c, nil
}
