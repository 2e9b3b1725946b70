package config

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/webhook"
)

// Hooks returns the webhooks with their secret files (secret_file,
// previous_secret_files) read, checked against the schema
// (webhook.Check).
func (c Config) Hooks(sc *schema.Compiled) ([]webhook.Hook, error) {
	hooks := make([]webhook.Hook, len(c.Webhooks))
	var errs []error
	for i, h := range c.Webhooks {
		fail := func(format string, args ...any) {
			errs = append(errs, fmt.Errorf("webhooks[%d] (%s): %w", i, h.Name, fmt.Errorf(format, args...)))
		}
		if h.SecretFile != "" {
			if h.Secret != "" {
				fail("set secret or secret_file, not both")
			}
			b, err := os.ReadFile(h.SecretFile)
			if err != nil {
				fail("secret_file: %w", err)
			}
			h.Secret, h.SecretFile = strings.TrimRight(string(b), "\r\n"), ""
		}
		if len(h.PreviousSecretFiles) > 0 {
			if len(h.PreviousSecrets) > 0 {
				fail("set previous_secrets or previous_secret_files, not both")
			}
			h.PreviousSecrets = make([]string, len(h.PreviousSecretFiles))
			for j, f := range h.PreviousSecretFiles {
				b, err := os.ReadFile(f)
				if err != nil {
					fail("previous_secret_files[%d]: %w", j, err)
				}
				h.PreviousSecrets[j] = strings.TrimRight(string(b), "\r\n")
			}
			h.PreviousSecretFiles = nil
		} else {
			h.PreviousSecrets = slices.Clone(h.PreviousSecrets)
		}
		hooks[i] = h
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if err := webhook.Check(hooks, sc); err != nil {
		return nil, err
	}
	return hooks, nil
}
