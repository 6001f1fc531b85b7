package capi

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// PluginDir is the per-user plugin directory scripts/install-plugins.sh
// fills: ${XDG_DATA_HOME:-$HOME/.local/share}/tensorbridge/plugins.
func PluginDir() string {
	base := os.Getenv("XDG_DATA_HOME")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return ""
		}
		base = filepath.Join(home, ".local", "share")
	}
	return filepath.Join(base, "tensorbridge", "plugins")
}

// PluginFileName is the file name a plugin for platform name ("cpu",
// "tpu", "cuda") is installed under: pjrt_c_api_<name>_plugin.so.
func PluginFileName(name string) string { return "pjrt_c_api_" + name + "_plugin.so" }

// FindPlugin returns the path of the plugin for platform name. It looks, in
// order, at each entry of $TENSORBRIDGE_PLUGIN_PATH (':'-separated; a
// directory is searched for PluginFileName(name), a file is taken when its
// base name contains name) and then in PluginDir. The error wraps
// fs.ErrNotExist and lists the places searched.
func FindPlugin(name string) (string, error) {
	var tried []string
	check := func(p string) bool {
		tried = append(tried, p)
		st, err := os.Stat(p)
		return err == nil && st.Mode().IsRegular()
	}
	for _, e := range filepath.SplitList(os.Getenv("TENSORBRIDGE_PLUGIN_PATH")) {
		if e == "" {
			continue
		}
		if st, err := os.Stat(e); err == nil && st.IsDir() {
			if p := filepath.Join(e, PluginFileName(name)); check(p) {
				return p, nil
			}
			continue
		}
		if strings.Contains(filepath.Base(e), name) && check(e) {
			return e, nil
		}
	}
	if d := PluginDir(); d != "" {
		if p := filepath.Join(d, PluginFileName(name)); check(p) {
			return p, nil
		}
	}
	return "", fmt.Errorf("pjrt: no %s plugin found (looked at %s; run scripts/install-plugins.sh or set TENSORBRIDGE_PLUGIN_PATH): %w",
		name, strings.Join(tried, ", "), fs.ErrNotExist)
}
