package main

import "github.com/jsdlq/jsdlq/shared/config"

// emulatorConfig is the Cloud Tasks emulator's configuration; its flags
// override it. Nothing is checked here:
// the listener reports a bad address.
type emulatorConfig struct {
	HostPort string // CLOUD_TASKS_EMULATOR_HOST: where it listens; "" = its default
	DataDir  string // CLOUD_TASKS_EMULATOR_DATA_DIR; "" = in memory
}

// loadConfig reads the Cloud Tasks emulator's configuration.
func loadConfig(lookup config.Lookup) emulatorConfig {
	r := config.NewReader(lookup)
	return emulatorConfig{
		HostPort: r.String("CLOUD_TASKS_EMULATOR_HOST", ""),
		DataDir:  r.String("CLOUD_TASKS_EMULATOR_DATA_DIR", ""),
	}
}
