package tensorbridge

// Version is the tensorbridge release this source belongs to.
const Version = "0.1.0-dev"
