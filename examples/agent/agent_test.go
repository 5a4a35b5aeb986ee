package main

import (
	"context"
	"strings"
	"testing"

	"github.com/jsdlq/jsdlq/shared/event"
)

func TestParse(t *testing.T) {
	env := map[string]string{"GOOGLE_CLOUD_PROJECT": "p"}
	tests := []struct {
		args    []string
		env     map[string]string
		wantErr string
	}{
		{[]string{"--name", "writer"}, env, ""},
		{nil, env, "--name is required"},
		{[]string{"--name", "a.b"}, env, "one subject token"},
		{[]string{"--name", "writer"}, nil, "GOOGLE_CLOUD_PROJECT is required"},
		{[]string{"--name", "writer", "--context-window", "0"}, env, "--context-window 0 is not positive"},
	}
	for _, tt := range tests {
		_, err := parse(tt.args, func(k string) string { return tt.env[k] })
		if (tt.wantErr == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.wantErr)) {
			t.Errorf("parse(%q) = %v, want error %q", tt.args, err, tt.wantErr)
		}
	}
}

func TestDecide(t *testing.T) {
	tests := []struct {
		task event.TriageTask
		want string
	}{
		{event.TriageTask{Reason: "impossible_task", Answers: []string{event.AnswerReplay, event.AnswerDiscard}}, event.AnswerDiscard},
		{event.TriageTask{Reason: "governance", Answers: []string{event.AnswerApprove, event.AnswerDiscard}}, event.AnswerApprove},
		{event.TriageTask{Reason: "provider_unavailable", Answers: []string{event.AnswerReplay, event.AnswerDiscard}}, event.AnswerReplay},
	}
	for _, tt := range tests {
		got, err := decide(context.Background(), tt.task)
		if err != nil || got.Answer != tt.want {
			t.Errorf("decide(%s, %v) = %q, %v; want %q", tt.task.Reason, tt.task.Answers, got.Answer, err, tt.want)
		}
	}
}

func TestSummarise(t *testing.T) {
	tests := []struct {
		text    string
		wantErr bool
	}{
		{"A first sentence. A second one.", false},
		{"   ", true},
	}
	for _, tt := range tests {
		if err := summarise(context.Background(), tt.text, event.Replay{MaxOutputTokens: 10}); (err != nil) != tt.wantErr {
			t.Errorf("summarise(%q) = %v, want error %t", tt.text, err, tt.wantErr)
		}
	}
}
