package config

import (
	"slices"
	"strings"

	"github.com/hashicorp/hcl/v2"
)

// Licensing of NVIDIA vGPU software in the guests (server.licensing, and a
// profile's own licensing block): the client configuration token that
// gpuvm puts in each guest whose GPU needs a licence, and the licensed
// product the guest asks for (gridd.conf's FeatureType). pkg/licensing
// makes the guest's files from it.
//
// The FeatureType values are NVIDIA's (Virtual GPU Client Licensing User
// Guide, "Configuring a Licensed Client on Linux", and NVML's
// nvmlGridLicenseFeatureCode_t): 0 unlicensed, 1 NVIDIA vGPU (the product
// is the one the vGPU type gives: Q vWS, B vPC, A vApps, C vCS), 2 NVIDIA
// RTX Virtual Workstation, 4 NVIDIA Virtual Compute Server.
type Licensing struct {
	// TokenFile is the client configuration token (.tok) downloaded from
	// the NVIDIA Licensing Portal or a DLS instance; gpuvmd reads it when
	// it makes a guest's seed. Its content is a secret: never in an API
	// answer, an event, a log line or the audit log.
	TokenFile string `json:"client_token_file"`
	// FeatureType is FeatureAuto or one of the named products.
	FeatureType string `json:"feature_type"`
	// Enabled is false when a profile turns the server's licensing off.
	Enabled bool `json:"enabled"`
	// LicenseServer is the licence server ("host[:port]") the token
	// points the guests at, for gpuvm admin doctor's reachability check;
	// "" when not said (the token itself carries it for the guests).
	LicenseServer string `json:"license_server,omitempty"`
	// Source is "file:line" of the block that set it.
	Source string `json:"source"`
}

// Feature types (licensing.feature_type).
const (
	// FeatureAuto picks the product from what the VM gets (pkg/licensing).
	FeatureAuto        = "auto"
	FeatureVGPU        = "vgpu"        // FeatureType=1
	FeatureWorkstation = "workstation" // FeatureType=2, RTX vWS
	FeatureCompute     = "compute"     // FeatureType=4, vCS
	FeatureUnlicensed  = "unlicensed"  // FeatureType=0
)

var featureTypes = []string{FeatureAuto, FeatureVGPU, FeatureWorkstation, FeatureCompute, FeatureUnlicensed}

type licensingBlock struct {
	Enabled         *bool     `hcl:"enabled,optional"`
	ClientTokenFile *string   `hcl:"client_token_file,optional"`
	FeatureType     *string   `hcl:"feature_type,optional"`
	LicenseServer   *string   `hcl:"license_server,optional"`
	DefRange        hcl.Range `hcl:",def_range"`
	Body            hcl.Body  `hcl:",body"`
}

// resolveLicensing resolves a licensing block over inherit (the server's,
// for a profile; nil for the server's own). It returns nil when licensing
// is not configured there.
func (r *resolver) resolveLicensing(b *licensingBlock, inherit *Licensing) *Licensing {
	if b == nil {
		if inherit == nil {
			return nil
		}
		l := *inherit
		return &l
	}
	l := &Licensing{FeatureType: FeatureAuto, Enabled: true, Source: rangeString(b.DefRange)}
	if inherit != nil {
		l.TokenFile, l.FeatureType, l.LicenseServer = inherit.TokenFile, inherit.FeatureType, inherit.LicenseServer
	}
	if b.LicenseServer != nil {
		l.LicenseServer = strings.TrimSpace(*b.LicenseServer)
		if l.LicenseServer == "" || strings.ContainsAny(l.LicenseServer, "/ ") {
			r.errf(valueRange(b.Body, "license_server", b.DefRange), "Invalid license_server",
				"%q: license_server is the host (and port) of your DLS instance, or api.cls.licensing.nvidia.com for CLS — no scheme or path.", *b.LicenseServer)
		}
	}
	if b.Enabled != nil {
		l.Enabled = *b.Enabled
	}
	if b.ClientTokenFile != nil {
		rng := valueRange(b.Body, "client_token_file", b.DefRange)
		if strings.TrimSpace(*b.ClientTokenFile) == "" {
			r.errf(rng, "Invalid client_token_file", "client_token_file names the client configuration token (.tok) from the NVIDIA Licensing Portal or your DLS; it may not be empty.")
		}
		l.TokenFile = r.path(*b.ClientTokenFile, rng)
	}
	if b.FeatureType != nil {
		if !slices.Contains(featureTypes, *b.FeatureType) {
			r.errf(valueRange(b.Body, "feature_type", b.DefRange), "Invalid feature_type",
				"%q: feature_type is one of %s (auto: vgpu for a vGPU or MIG slice, workstation for a whole GPU with a remote desktop, compute for one without).",
				*b.FeatureType, strings.Join(featureTypes, ", "))
		} else {
			l.FeatureType = *b.FeatureType
		}
	}
	if l.Enabled && l.TokenFile == "" && b.ClientTokenFile == nil {
		r.errf(b.DefRange, "Missing client_token_file",
			"Licensing needs the client configuration token: set client_token_file here or in the server's licensing block (or enabled = false).")
	}
	return l
}

// resolveProfileLicensing sets p.Licensing: the server's licensing with
// the profile's block over it, for a profile with a GPU. A guest gets its
// token through cloud-init, so a licensed profile without a cloud_init
// block is warned about.
func (r *resolver) resolveProfileLicensing(b *profileBlock, p *Profile) {
	if p.GPU == nil {
		if b.Licensing != nil {
			r.warnf(b.Licensing.DefRange, "Licensing without a GPU",
				"Profile %q has no gpu block: its VMs hold no NVIDIA GPU to license, so this block does nothing.", p.Name)
		}
		return
	}
	l := r.resolveLicensing(b.Licensing, r.cfg.Server.Licensing)
	if l == nil || !l.Enabled {
		p.Licensing = l
		return
	}
	p.Licensing = l
	if p.CloudInit == nil {
		rng := b.DefRange
		if b.Licensing != nil {
			rng = b.Licensing.DefRange
		}
		r.warnf(rng, "Licensed profile without cloud_init",
			"Profile %q is licensed (%s) but has no cloud_init block: gpuvm gives a guest its client configuration token through cloud-init, so its VMs get none and the driver stays unlicensed. Add a cloud_init block or licensing { enabled = false }.", p.Name, l.Source)
	}
}
