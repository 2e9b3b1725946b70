package config

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/webhook"
)

// Hooks returns the webhooks with their secret files read, checked
// against the schema (webhook.Check).
func (c Config) Hooks(sc *schema.Compiled) ([]webhook.Hook, error) {
	hooks := make([]webhook.Hook, len(c.Webhooks))
	var errs []error
	for i, h := range c.Webhooks {
		if h.SecretFile != "" {
			if h.Secret != "" {
				errs = append(errs, fmt.Errorf("webhooks[%d] (%s): set secret or secret_file, not both", i, h.Name))
			}
			b, err := os.ReadFile(h.SecretFile)
			if err != nil {
				errs = append(errs, fmt.Errorf("webhooks[%d] (%s): secret_file: %w", i, h.Name, err))
			}
			h.Secret, h.SecretFile = strings.TrimRight(string(b), "\r\n"), ""
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
