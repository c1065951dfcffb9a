package admin

import (
	"context"
	"net/http"

	"github.com/costguard/costguard/complexity"
)

// SharedListSizes is where several processes' recorded list sizes meet.
type SharedListSizes interface {
	// ListSizes returns every process's recorded sizes, merged per field
	// (complexity.ListSizeStats.Merge).
	ListSizes(ctx context.Context) ([]complexity.ListSizeStats, error)
}

// listSizeSources are where GET /admin/list-sizes reads: shared, when
// set, merges every process's; local is this process's recorder.
type listSizeSources struct {
	local  *complexity.ListSizeRecorder
	shared SharedListSizes
}

// listSizeField is one field of GET /admin/list-sizes: what was recorded,
// and the size suggested from it.
type listSizeField struct {
	complexity.ListSizeStats
	Suggested int64 `json:"suggested"`
}

// listSizes answers GET /admin/list-sizes: per field whose lists were
// priced at an assumption, what they returned and the suggested size
// (complexity.ListSizeStats.Suggested); then the suggestions as the map
// complexity.WithAssumedSizes takes (assumed_sizes) and as @listSize
// lines to paste into the schema (schema). From SharedListSizes when set
// (every process), else from this process's recorder.
func (h *handler) listSizes(w http.ResponseWriter, r *http.Request) {
	var stats []complexity.ListSizeStats
	if h.sizes.shared != nil {
		var err error
		if stats, err = h.sizes.shared.ListSizes(r.Context()); err != nil {
			h.fail(w, r, err)
			return
		}
	} else {
		stats = h.sizes.local.Fields()
	}
	fields := make([]listSizeField, len(stats))
	for i, s := range stats {
		if s.Buckets == nil {
			s.Buckets = []int64{}
		}
		fields[i] = listSizeField{s, s.Suggested()}
	}
	suggested := complexity.SuggestedSizes(stats)
	writeJSON(w, http.StatusOK, struct {
		Fields       []listSizeField `json:"fields"`
		AssumedSizes map[string]int  `json:"assumed_sizes"`
		Schema       string          `json:"schema"`
		Dropped      int64           `json:"dropped"`
	}{fields, suggested, complexity.FormatListSizes(suggested), h.sizes.local.Dropped()})
}
