package api

import "time"

// ImportImageRequest is the body of POST /v1/admin/images: a file on the
// gpuvmd host to store as version 1 of a new image.
type ImportImageRequest struct {
	// SourcePath is the absolute path of a qcow2, raw or ISO file on the
	// gpuvmd host; its format is read with qemu-img, never from its name.
	SourcePath string `json:"source_path,omitempty"`
	// Upload imports the file uploaded for Name (PUT
	// /v1/admin/images/uploads/{name}) instead; the upload is removed
	// whatever the outcome.
	Upload bool `json:"upload,omitempty"`
	// Name is the image's name: 1–63 lower-case letters, digits, '.', '_', '-'.
	Name string `json:"name"`
	// OS is linux or windows; Firmware uefi (default) or bios.
	OS       string `json:"os"`
	Firmware string `json:"firmware,omitempty"`
	// SHA256, when set, is the checksum the copy must have (64 lower-case
	// hex digits); a mismatch stores nothing.
	SHA256 string `json:"sha256,omitempty"`
}

// PublishImageRequest is the body of POST /v1/admin/images/publish: a
// stopped VM whose disk becomes the next version of an image.
type PublishImageRequest struct {
	// VM is the VM's ID.
	VM   string `json:"vm"`
	Name string `json:"name"`
	// OS and Firmware default to the newest version's of the image, else
	// to the VM's profile's.
	OS       string `json:"os,omitempty"`
	Firmware string `json:"firmware,omitempty"`
}

// Image is a version of a stored image. Users see its name, version, OS,
// firmware, format and virtual size; admins everything.
type Image struct {
	Name        string `json:"name"`
	Version     int    `json:"version"`
	OS          string `json:"os"`
	Firmware    string `json:"firmware"`
	Format      string `json:"format"` // qcow2, raw or iso
	VirtualSize int64  `json:"virtual_size"`
	// Admins only:
	ActualSize int64      `json:"actual_size,omitempty"`
	SHA256     string     `json:"sha256,omitempty"`
	Pool       string     `json:"pool,omitempty"`
	Volume     string     `json:"volume,omitempty"`
	Origin     string     `json:"origin,omitempty"` // import or publish
	SourcePath string     `json:"source_path,omitempty"`
	SourceVM   string     `json:"source_vm,omitempty"`
	CreatedBy  string     `json:"created_by,omitempty"`
	CreatedAt  *time.Time `json:"created_at,omitempty"`
	// Profiles are the profiles whose disk the configuration makes on this
	// version; VMs the live VMs whose disk is made on it ("OWNER/NAME (ID)").
	Profiles []string `json:"profiles,omitempty"`
	VMs      []string `json:"vms,omitempty"`
	VMCount  int      `json:"vm_count,omitempty"`
}

// ImageList is the answer to GET /v1/images.
type ImageList struct {
	Items []Image `json:"items"`
}

// DeletedImages is the answer to DELETE /v1/admin/images/{ref}.
type DeletedImages struct {
	Deleted []Image `json:"deleted"`
}

// UploadOffsetHeader says where a chunk of an upload starts (PUT), and
// where the upload ends (every answer of the upload routes).
const UploadOffsetHeader = "Upload-Offset"

// Upload is the state of a file being uploaded to import: how many bytes
// the server has.
type Upload struct {
	Name   string `json:"name"`
	Offset int64  `json:"offset"`
}
