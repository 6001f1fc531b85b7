package tensorbridge

// WithGetenv is withGetenv, for the tests of Open in package
// tensorbridge_test.
var WithGetenv = withGetenv
