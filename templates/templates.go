// Package templates holds the text templates gpuvm renders and an admin may
// override: cloud-init/ is the NoCloud seed of every VM (user-data,
// meta-data, network-config). An override directory holds files of the same
// names; pkg/hypervisor/cloudinit documents the data they receive.
package templates

import "embed"

// FS is the built-in templates.
//
//go:embed cloud-init/*.tmpl
var FS embed.FS
