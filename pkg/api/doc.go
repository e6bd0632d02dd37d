// Package api holds gpuvm's wire types: what the REST API and the CLI's
// --json output read and write. It is pure Go with no dependencies beyond
// the standard library, so any client can import it.
package api
