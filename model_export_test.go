package tensorbridge

// ModelPath is the name m was loaded under (LoadModel's path, LoadONNX's
// name), which names its compiled programs; for TestLoadONNX (package
// tensorbridge_test). Callers know the path they loaded: it is not API.
func ModelPath(m *Model) string { return m.path }
