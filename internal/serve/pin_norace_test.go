//go:build !race

package serve

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/costguard/costguard/internal/testenv"
	"github.com/costguard/costguard/middleware/querycache"
)

// This file runs without the race detector only (.ci/run runs it so): the
// flood lexes 432 MB of documents, about 13 s here and many minutes under
// -race, which adds nothing a heap bound needs.

// 480 named documents of 900 KB from 4 addresses, 400 admitted and 80
// refused 429, each recorded in the timeline, the operation costs, the
// top spenders and the metrics: the live heap they leave stays within the
// query cache's byte bound and pinSlack. Were each kept operation name a
// substring of its document, the flood would keep 432 MB alive.
func TestNamedDocumentFloodPinsNothing(t *testing.T) {
	testenv.Long(t)
	admitted, refused, grown := flood(t, 4, 120, 900<<10, 100)
	t.Logf("%d admitted, %d refused 429: live heap grew by %.1f MB", admitted, refused, float64(grown)/(1<<20))
	require.Equal(t, 400, admitted)
	require.Equal(t, 80, refused)
	require.LessOrEqual(t, grown, int64(querycache.DefaultBytes+pinSlack))
}
