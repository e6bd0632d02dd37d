// Package server is gpuvmd's HTTP API: authentication, the routes, and
// errors as RFC 9457 problem+json. Handlers depend on small interfaces for
// what they need (the store, the backends, the configuration), defined here
// where they are used.
package server
