//go:build tools

// Package gotests names the Go client whose own tests the Kafka e2e tests run against
// Lakelog: franz-go's kgo (its share-group tests among them), built by
// scripts/install-deps.sh into .tools/go/kgo.test.
package gotests

import _ "github.com/twmb/franz-go/pkg/kgo"
