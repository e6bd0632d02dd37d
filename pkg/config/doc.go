// Package profile reads gpuvm's HCL configuration: the server, base images,
// cloud-init templates, the profiles people may ask for, and the policy that
// governs sharing. docs/config.md describes the language; schema.go is its
// definition.
//
// Load(dir) parses every *.hcl file of a directory, decodes it with gohcl
// (unknown blocks and attributes are errors, with "did you mean"), checks
// values, references between blocks and what this server's GPUs can give
// (vGPU types and MIG profiles against pkg/gpu), and returns a resolved
// Config — defaults filled in, sizes in bytes, durations as time.Duration — or
// no Config at all when there is an error. Every diagnostic of every file is
// returned together, each with the range of the offending text; a Loader
// renders them with hcl's diagnostic writer (Loader.WriteDiagnostics).
//
// The package is pure Go (no cgo) and reads nothing but the configuration
// files (and the timezone database). Evaluation is safe on untrusted text:
// no variables, only pure functions (env() and file() exist only when a
// configuration on disk opts in), no for expressions, bounded function
// results, and limits on size, nesting and counts (Parse is the entry point
// for text that does not come from the configuration directory). FuzzLoad
// checks that nothing panics.
package config
