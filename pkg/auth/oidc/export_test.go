package oidc

// DiscoveryBackoff lets tests shorten the wait after a failed discovery.
var DiscoveryBackoff = &discoveryBackoff
