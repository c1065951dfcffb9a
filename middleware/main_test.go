package middleware_test

import (
	"testing"

	"github.com/costguard/costguard/internal/redistest"
)

// TestMain removes the package's shared Redis servers (a Cluster the
// Cluster cases share, each under its own key prefix) after the tests.
func TestMain(m *testing.M) { redistest.Main(m) }
