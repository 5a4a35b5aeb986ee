package main

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"time"

	"github.com/jsdlq/jsdlq/shared/event"
)

// pushPrefix is where the local Pub/Sub push subscription delivers: the
// topic's full name follows, as the functions framework expects of a push
// endpoint.
const pushPrefix = "/Classify/"

var pushTopic = regexp.MustCompile(`^` + pushPrefix + `(projects/[^/]+/topics/[^/]+)/*$`)

// maxPush bounds a push body: Pub/Sub messages are at most 10 MB, base64
// makes that about 13.4 MB.
const maxPush = 14 << 20

// pubsubPush is the part of the push envelope the CloudEvent's attributes
// come from.
type pubsubPush struct {
	Message struct {
		ID          string `json:"messageId"`
		PublishTime string `json:"publishTime"`
	} `json:"message"`
	Subscription string `json:"subscription"`
}

// pushAsCloudEvent answers a push to pushPrefix+topic by posting the same
// envelope to classify as the binary-mode CloudEvent Eventarc makes of it in
// production (google.cloud.pubsub.topic.v1.messagePublished, id = message
// id, source = the topic), and returns classify's status, so Pub/Sub's
// acknowledgement and retries follow classify's answer.
func pushAsCloudEvent(classify string, log *slog.Logger) func(http.ResponseWriter, *http.Request) {
	client := &http.Client{Timeout: 10 * time.Minute}
	return func(w http.ResponseWriter, r *http.Request) {
		m := pushTopic.FindStringSubmatch(r.URL.Path)
		if m == nil || r.Method != http.MethodPost {
			http.NotFound(w, r)
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxPush))
		var push pubsubPush
		if err == nil {
			err = json.Unmarshal(body, &push)
		}
		if err != nil || push.Message.ID == "" {
			// Not a push envelope: a redelivery cannot fix it.
			log.Warn("push refused: not a Pub/Sub push envelope", "path", event.Wire(r.URL.Path), "error", errString(err))
			http.Error(w, "not a Pub/Sub push envelope", http.StatusBadRequest)
			return
		}
		req, err := http.NewRequestWithContext(r.Context(), http.MethodPost, classify, bytes.NewReader(body))
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Ce-Specversion", "1.0")
		req.Header.Set("Ce-Type", "google.cloud.pubsub.topic.v1.messagePublished")
		req.Header.Set("Ce-Source", "//pubsub.googleapis.com/"+m[1])
		req.Header.Set("Ce-Id", push.Message.ID)
		if push.Message.PublishTime != "" {
			req.Header.Set("Ce-Time", push.Message.PublishTime)
		}
		resp, err := client.Do(req)
		if err != nil {
			// Classify did not answer: Pub/Sub redelivers.
			log.Error("push: classify unreachable", "error", err.Error())
			http.Error(w, "classify unreachable", http.StatusServiceUnavailable)
			return
		}
		defer resp.Body.Close()
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
	}
}

func errString(err error) string {
	if err == nil {
		return "no message id"
	}
	return err.Error()
}
