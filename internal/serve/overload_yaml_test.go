package serve

import (
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/costguard/costguard/overload"
)

// The configuration file's overload keys decode into the overload
// package's types: the priority names are Config.ShedAt's keys, and a
// degradation entry's name and at are Feature's fields. (The package has
// no YAML of its own: its module does not require a YAML package.)
func TestOverloadYAMLKeys(t *testing.T) {
	const doc = `
overload:
  max_in_flight: 64
  shed_at: {sheddable: 0.5, normal: 0.8, high: 0.9}
  adaptive: true
degradation: [{name: recommendations, at: 0.7}, {name: search, at: 0.85}]
`
	var file struct {
		Overload struct {
			MaxInFlight int                           `yaml:"max_in_flight"`
			ShedAt      map[overload.Priority]float64 `yaml:"shed_at"`
			Adaptive    bool                          `yaml:"adaptive"`
		} `yaml:"overload"`
		Degradation []overload.Feature `yaml:"degradation"`
	}
	if err := yaml.Unmarshal([]byte(doc), &file); err != nil {
		t.Fatal(err)
	}
	cfg := overload.Config{
		MaxInFlight: file.Overload.MaxInFlight,
		ShedAt:      file.Overload.ShedAt,
		Adaptive:    file.Overload.Adaptive,
		Degradation: file.Degradation,
	}
	if cfg.ShedAt[overload.Sheddable] != 0.5 || cfg.ShedAt[overload.Normal] != 0.8 || cfg.ShedAt[overload.High] != 0.9 {
		t.Errorf("shed_at decoded as %v", cfg.ShedAt)
	}
	if len(cfg.Degradation) != 2 || cfg.Degradation[0] != (overload.Feature{Name: "recommendations", At: 0.7}) ||
		cfg.Degradation[1] != (overload.Feature{Name: "search", At: 0.85}) {
		t.Errorf("degradation decoded as %v", cfg.Degradation)
	}
	if err := cfg.Validate(); err != nil {
		t.Error(err)
	}
	var bad map[overload.Priority]float64
	if err := yaml.Unmarshal([]byte(`{low: 0.5}`), &bad); err == nil || !strings.Contains(err.Error(), "low") {
		t.Errorf("an unknown priority name decoded: %v, %v", bad, err)
	}
}
