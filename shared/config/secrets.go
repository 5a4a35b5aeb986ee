package config

import (
	"path/filepath"
	"regexp"
)

// Secrets is how secrets at rest (the webhook signing keys) are sealed
// (shared/secretbox): by envelope encryption whose key-encryption key is a
// Cloud KMS CryptoKey in production, a key file in the local stack.
type Secrets struct {
	// KMSKey is SECRETS_KMS_KEY, the CryptoKey's resource name
	// (projects/P/locations/L/keyRings/R/cryptoKeys/K).
	KMSKey string
	// LocalKeyFile is SECRETS_LOCAL_KEY_FILE, an absolute path to the
	// local stack's key (make up writes .local/secrets.key). Refused when
	// K_SERVICE is set or FIRESTORE_EMULATOR_HOST is not, as every
	// local-only setting.
	LocalKeyFile string
}

// Set tells whether a key is configured.
func (s Secrets) Set() bool { return s.KMSKey != "" || s.LocalKeyFile != "" }

// kmsKeyName is a CryptoKey's resource name; not a version's: Encrypt uses
// the key's primary version and Decrypt finds the version in the
// ciphertext, so rotating the key needs no new configuration.
var kmsKeyName = regexp.MustCompile(`^projects/[^/]+/locations/[^/]+/keyRings/[^/]+/cryptoKeys/[^/]+$`)

// ValidKMSKey tells whether name is a Cloud KMS CryptoKey's resource name.
func ValidKMSKey(name string) bool { return kmsKeyName.MatchString(name) }

// ReadSecrets reads SECRETS_KMS_KEY and SECRETS_LOCAL_KEY_FILE: one of
// them, not both, and one of them is required when required (the
// components that seal or open webhook secrets: deliver, the console's
// tenant API, dlqctl's webhook commands).
func ReadSecrets(r *Reader, common Common, required bool) Secrets {
	s := Secrets{KMSKey: r.String("SECRETS_KMS_KEY", ""), LocalKeyFile: r.String("SECRETS_LOCAL_KEY_FILE", "")}
	r.Check(s.KMSKey == "" || ValidKMSKey(s.KMSKey), "SECRETS_KMS_KEY", "%q is not projects/P/locations/L/keyRings/R/cryptoKeys/K", s.KMSKey)
	r.Check(s.KMSKey == "" || s.LocalKeyFile == "", "SECRETS_LOCAL_KEY_FILE", "set with SECRETS_KMS_KEY: name one key-encryption key")
	if s.LocalKeyFile != "" {
		r.Check(filepath.IsAbs(s.LocalKeyFile), "SECRETS_LOCAL_KEY_FILE", "%q is not an absolute path", s.LocalKeyFile)
		if common.OnGoogleCloud || common.FirestoreEmulatorHost == "" {
			r.fail("SECRETS_LOCAL_KEY_FILE", "is for the local stack only and is refused when K_SERVICE is set or FIRESTORE_EMULATOR_HOST is not (use SECRETS_KMS_KEY)")
			s.LocalKeyFile = ""
		}
	}
	r.Check(!required || s.Set(), "SECRETS_KMS_KEY", "required: webhook signing secrets are sealed with a Cloud KMS key (or, in the local stack, SECRETS_LOCAL_KEY_FILE)")
	return s
}
