package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"cloud.google.com/go/firestore"
)

// Payload limits. A Firestore document holds at most 1 MiB, so payloads
// above InlinePayload go into chunk documents of ChunkSize bytes.
const (
	InlinePayload = 256 << 10
	ChunkSize     = 512 << 10
	// MaxPayload bounds what is stored at all (NATS allows at most 64 MiB;
	// deployments usually keep the 1 MiB default, raised to 8 MiB at most).
	MaxPayload = 16 << 20
)

// maxInlineEntry bounds an entry document with its payload inline, below
// Firestore's 1 MiB for a document (with room for the other fields).
const maxInlineEntry = 768 << 10

// fitsInline reports whether e's payload can stay in its document: headers
// are stored inline too, and a message may carry hundreds of kilobytes of
// them, so a payload under InlinePayload can still make a document Firestore
// refuses for good (a retried event that never became an entry).
func fitsInline(e *Entry) bool {
	size := len(e.Payload)
	for name, vs := range e.Headers {
		size += len(name)
		for _, v := range vs {
			size += len(v) + 1
		}
	}
	return size <= maxInlineEntry
}

// PayloadSum is the hex sha256 of a payload.
func PayloadSum(p []byte) string {
	sum := sha256.Sum256(p)
	return hex.EncodeToString(sum[:])
}

// chunkID names a chunk by the payload's content and its index: a chunk is
// written once per content, so concurrent or repeated writers of the same
// payload write the same documents, and a different payload for the same
// entry can never overwrite the chunks an entry already points to.
func chunkID(sum string, n int) string { return fmt.Sprintf("%s-%04d", sum[:16], n) }

// writeChunks stores a large payload's chunks before the entry that points
// to them is committed. They carry expire_at so that chunks of an entry that
// never committed are removed by the same TTL policy.
func (s *Store) writeChunks(ctx context.Context, id string, e *Entry) error {
	p := e.Payload
	n := 0
	bw := s.fs.BulkWriter(ctx)
	var jobs []*firestore.BulkWriterJob
	for off := 0; off < len(p); off += ChunkSize {
		end := min(off+ChunkSize, len(p))
		ref := s.entryRef(id).Collection(PayloadChunks).Doc(chunkID(e.PayloadSHA256, n))
		j, err := bw.Set(ref, map[string]any{
			"n":              n,
			"data":           p[off:end],
			"payload_sha256": e.PayloadSHA256,
			"expire_at":      e.ExpireAt,
		})
		if err != nil {
			bw.End()
			return fmt.Errorf("firestore bulk set %s chunk %d: %w", id, n, err)
		}
		jobs = append(jobs, j)
		n++
	}
	bw.End()
	for i, j := range jobs {
		if _, err := j.Results(); err != nil {
			return fmt.Errorf("firestore write %s/%s/%s/%d: %w", FailureLog, id, PayloadChunks, i, err)
		}
	}
	s.wrote(n)
	e.PayloadChunkCount = n
	return nil
}

// LoadPayload fills e.Payload from its chunks (entries read with GetMeta or
// returned by Transition) and verifies its sha256. A missing payload is not
// an error here: e.PayloadMissing tells.
func (s *Store) LoadPayload(ctx context.Context, e *Entry) error {
	if e.PayloadMissing {
		return nil
	}
	return s.loadPayload(ctx, e)
}

// loadPayload fills e.Payload from its chunks and verifies the sha256.
func (s *Store) loadPayload(ctx context.Context, e *Entry) error {
	if e.PayloadChunkCount > 0 {
		refs := make([]*firestore.DocumentRef, e.PayloadChunkCount)
		for i := range refs {
			refs[i] = s.entryRef(e.ID).Collection(PayloadChunks).Doc(chunkID(e.PayloadSHA256, i))
		}
		snaps, err := s.fs.GetAll(ctx, refs)
		s.read(len(refs))
		if err != nil {
			return fmt.Errorf("firestore get payload chunks of %s: %w", e.ID, err)
		}
		buf := make([]byte, 0, e.PayloadSize)
		for i, snap := range snaps {
			if !snap.Exists() {
				return fmt.Errorf("%w: entry %s: chunk %d of %d is missing", ErrCorrupt, e.ID, i, len(snaps))
			}
			data, _ := snap.Data()["data"].([]byte)
			buf = append(buf, data...)
		}
		e.Payload = buf
	}
	if !e.PayloadMissing && PayloadSum(e.Payload) != e.PayloadSHA256 {
		return fmt.Errorf("%w: entry %s: %d bytes, sha256 %s, recorded %s", ErrCorrupt, e.ID, len(e.Payload), PayloadSum(e.Payload), e.PayloadSHA256)
	}
	return nil
}
