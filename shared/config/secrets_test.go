package config

import (
	"strings"
	"testing"
)

func TestReadSecrets(t *testing.T) {
	const key = "projects/p/locations/europe-west1/keyRings/jsdlq/cryptoKeys/secrets"
	local := map[string]string{"FIRESTORE_EMULATOR_HOST": "127.0.0.1:8681"}
	tests := []struct {
		name     string
		env      map[string]string
		required bool
		want     Secrets
		wantErr  string
	}{
		{"kms", map[string]string{"SECRETS_KMS_KEY": key}, true, Secrets{KMSKey: key}, ""},
		{"a key version is not a key", map[string]string{"SECRETS_KMS_KEY": key + "/cryptoKeyVersions/1"}, true, Secrets{}, "SECRETS_KMS_KEY"},
		{"not a key name", map[string]string{"SECRETS_KMS_KEY": "secrets"}, false, Secrets{}, "SECRETS_KMS_KEY"},
		{"local", map[string]string{"FIRESTORE_EMULATOR_HOST": "127.0.0.1:8681", "SECRETS_LOCAL_KEY_FILE": "/w/.local/secrets.key"}, true, Secrets{LocalKeyFile: "/w/.local/secrets.key"}, ""},
		{"local, relative", map[string]string{"FIRESTORE_EMULATOR_HOST": "127.0.0.1:8681", "SECRETS_LOCAL_KEY_FILE": ".local/secrets.key"}, true, Secrets{}, "absolute"},
		{"local on Cloud Run", map[string]string{"K_SERVICE": "deliver", "FIRESTORE_EMULATOR_HOST": "127.0.0.1:8681", "SECRETS_LOCAL_KEY_FILE": "/k"}, false, Secrets{}, "SECRETS_LOCAL_KEY_FILE"},
		{"local without the emulator", map[string]string{"SECRETS_LOCAL_KEY_FILE": "/k"}, false, Secrets{}, "SECRETS_LOCAL_KEY_FILE"},
		{"both", map[string]string{"FIRESTORE_EMULATOR_HOST": "127.0.0.1:8681", "SECRETS_KMS_KEY": key, "SECRETS_LOCAL_KEY_FILE": "/k"}, true, Secrets{}, "one key-encryption key"},
		{"required, none", local, true, Secrets{}, "SECRETS_KMS_KEY: required"},
		{"not required, none", local, false, Secrets{}, ""},
	}
	for _, tt := range tests {
		env := map[string]string{"GOOGLE_CLOUD_PROJECT": "p"}
		for k, v := range tt.env {
			env[k] = v
		}
		r := NewReader(MapLookup(env))
		got := ReadSecrets(r, ReadCommon(r), tt.required)
		err := r.Err()
		switch {
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
			t.Errorf("%s: ReadSecrets() error = %v, want one naming %q", tt.name, err, tt.wantErr)
		case tt.wantErr == "" && err != nil:
			t.Errorf("%s: ReadSecrets() error = %v", tt.name, err)
		case tt.wantErr == "" && got != tt.want:
			t.Errorf("%s: ReadSecrets() = %+v, want %+v", tt.name, got, tt.want)
		}
	}
}
