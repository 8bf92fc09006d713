package sim

import (
	"embed"
	"sort"
	"strings"
)

//go:embed scenarios/*.yaml
var presetFS embed.FS

// Presets lists the built-in scenarios, by name: LoadScenario and
// `floodgate sim --scenario NAME` accept these names.
func Presets() []string {
	entries, _ := presetFS.ReadDir("scenarios")
	var names []string
	for _, e := range entries {
		names = append(names, strings.TrimSuffix(e.Name(), ".yaml"))
	}
	sort.Strings(names)
	return names
}

func presetData(name string) ([]byte, bool) {
	if strings.ContainsAny(name, "/\\.") {
		return nil, false
	}
	data, err := presetFS.ReadFile("scenarios/" + name + ".yaml")
	return data, err == nil
}
