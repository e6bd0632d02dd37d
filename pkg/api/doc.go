// Package api holds gpuvm's wire types: what the REST API and the CLI's
// --json output read and write. It is pure Go with no dependencies beyond
// the standard library and pkg/gpu (pure tables, no I/O), so any client can
// import it. Conversions from gpuvm's internal models (FromHost) live here,
// at the edge.
package api
