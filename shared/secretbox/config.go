package secretbox

import (
	"fmt"

	"google.golang.org/api/option"

	"github.com/jsdlq/jsdlq/shared/config"
)

// FromConfig returns the box cfg names: Cloud KMS (its client made on
// first use) or the local key file (read now). opts are the KMS client's.
func FromConfig(cfg config.Secrets, opts ...option.ClientOption) (*Box, error) {
	switch {
	case cfg.KMSKey != "":
		w, err := NewKMS(cfg.KMSKey, opts...)
		if err != nil {
			return nil, err
		}
		return New(w), nil
	case cfg.LocalKeyFile != "":
		w, err := LoadLocalKey(cfg.LocalKeyFile)
		if err != nil {
			return nil, err
		}
		return New(w), nil
	}
	return nil, fmt.Errorf("%w: neither SECRETS_KMS_KEY nor SECRETS_LOCAL_KEY_FILE is set", ErrKey)
}
