package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/hypervisor"
	"github.com/gpuvm/gpuvm/pkg/images"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// Images imports, publishes, lists and deletes the stored disk images
// (images.Manager).
type Images interface {
	Import(ctx context.Context, req images.ImportRequest) (*store.Image, error)
	Publish(ctx context.Context, req images.PublishRequest) (*store.Image, error)
	List(ctx context.Context) ([]images.Entry, error)
	Delete(ctx context.Context, name string, version int) ([]store.Image, error)
	Get(ctx context.Context, name string, version int) (*store.Image, error)
	UploadOffset(name string) (int64, error)
	UploadChunk(name string, offset int64, r io.Reader) (int64, error)
	DiscardUpload(name string) error
}

var pImageRef = param{Name: "ref", In: "path", Description: "NAME (every version of the image) or NAME@VERSION", Type: "string"}

var pUploadName = param{Name: "name", In: "path", Description: "the name the uploaded image is to have", Type: "string"}
var pUploadOffset = param{Name: api.UploadOffsetHeader, In: "header", Description: "where the chunk starts: the upload's length so far (GET it after a broken connection)", Type: "integer"}
var pContentRange = param{Name: "Content-Range", In: "header", Description: "optional: bytes FIRST-LAST/TOTAL (or /*), which must agree with Upload-Offset (FIRST) and Content-Length (LAST-FIRST+1)", Type: "string"}

var imageAPIRoutes = []route{
	{Method: "GET", Path: "/v1/images", Summary: "List the stored images, every version: users see name, version, OS, firmware, format and size; admins also checksum, volume, origin, which profiles use each and the VMs whose disks are made on it", Auth: authUser, Status: 200, Answer: api.ImageList{}, Errors: []int{503}},
	{Method: "POST", Path: "/v1/admin/images", Summary: "Import a qcow2, raw or ISO file on the gpuvmd host as version 1 of a new image: streamed into the storage pool while its SHA-256 is computed, its format and virtual size read with qemu-img. A bad checksum, a format other than qcow2/raw/ISO, a taken name or a source that changes while it is copied stores nothing (422, naming the field); a storage pool that fails is the server's (500; 503 while libvirt is unreachable) and stores nothing either", Auth: authAdmin, Body: api.ImportImageRequest{}, Status: 201, Answer: api.Image{}, Errors: []int{400, 409, 413, 422, 500, 503}},
	{Method: "POST", Path: "/v1/admin/images/publish", Summary: "Turn a stopped VM's disk into the next version of an image (version 1 of a new one), flattened into a standalone qcow2 volume. A VM that is not stopped is refused", Auth: authAdmin, Body: api.PublishImageRequest{}, Status: 201, Answer: api.Image{}, Errors: []int{400, 404, 409, 413, 422, 503}},
	{Method: "GET", Path: "/v1/admin/images/uploads/{name}", Summary: "Where the upload of a file to import as image NAME ends (404: not started); also in the Upload-Offset header", Auth: authAdmin, Params: []param{pUploadName}, Status: 200, Answer: api.Upload{}, Errors: []int{404, 503}},
	{Method: "PUT", Path: "/v1/admin/images/uploads/{name}", Summary: "Append a chunk (the body, at most 64 MiB) to the upload of a file to import as image NAME, at Upload-Offset, which must be where the upload ends (409 with the right offset otherwise); a chunk that breaks off (a body shorter or longer than its Content-Length, a connection closed half-way: 400 on field body; too slow: 408) is dropped whole, and the answer's Upload-Offset says where to send it again. A name no image can have is 422 on field name. Import it with POST /v1/admin/images {upload: true}", Auth: authAdmin, Params: []param{pUploadName, pUploadOffset, pContentRange}, Status: 200, Answer: api.Upload{}, Errors: []int{400, 404, 408, 409, 422, 500, 503}},
	{Method: "DELETE", Path: "/v1/admin/images/uploads/{name}", Summary: "Abandon the upload of a file to import as image NAME", Auth: authAdmin, Params: []param{pUploadName}, Status: 200, Answer: api.Upload{}, Errors: []int{404, 503}},
	{Method: "DELETE", Path: "/v1/admin/images/{ref}", Summary: "Delete a version of an image, or every version, with its volume; refused (409, naming them) while VMs' disks are made on it", Auth: authAdmin, Params: []param{pImageRef}, Status: 200, Answer: api.DeletedImages{}, Errors: []int{400, 404, 409, 503}},
}

func (s *Server) imageRoutes(v1, admin *gin.RouterGroup) {
	v1.GET("/images", s.requireImages, s.listImages)
	admin.POST("/admin/images", s.requireImages, s.stream, s.importImage) // a copy may outlast the write timeout
	admin.POST("/admin/images/publish", s.requireImages, s.stream, s.publishImage)
	admin.DELETE("/admin/images/:ref", s.requireImages, s.deleteImage)
	admin.GET("/admin/images/uploads/:name", s.requireImages, s.uploadOffset)
	admin.PUT("/admin/images/uploads/:name", s.requireImages, s.uploadChunk)
	admin.DELETE("/admin/images/uploads/:name", s.requireImages, s.discardUpload)
}

func (s *Server) answerUpload(c *gin.Context, name string, offset int64) {
	c.Header(api.UploadOffsetHeader, strconv.FormatInt(offset, 10))
	c.JSON(http.StatusOK, api.Upload{Name: name, Offset: offset})
}

func (s *Server) uploadOffset(c *gin.Context) {
	name := c.Param("name")
	off, err := s.Images.UploadOffset(name)
	if err != nil {
		s.writeProblem(c, imageProblem(err))
		return
	}
	s.answerUpload(c, name, off)
}

func (s *Server) uploadChunk(c *gin.Context) {
	name := c.Param("name")
	if err := images.CheckName(name); err != nil {
		s.writeProblem(c, imageProblem(err))
		return
	}
	rng, err := parseContentRange(c.GetHeader("Content-Range"))
	if err != nil {
		s.writeProblem(c, withField(errBadRequest, "Content-Range", err.Error()))
		return
	}
	off, err := strconv.ParseInt(c.GetHeader(api.UploadOffsetHeader), 10, 64)
	if err != nil || off < 0 {
		s.writeProblem(c, withField(errBadRequest, api.UploadOffsetHeader, "say where the chunk starts: "+api.UploadOffsetHeader+": N, the upload's length so far"))
		return
	}
	if err := rng.agrees(off, c.Request.ContentLength); err != nil {
		s.writeProblem(c, withField(errBadRequest, "Content-Range", err.Error()))
		return
	}
	auditTarget(c, "upload/"+name)
	body := &declaredBody{r: c.Request.Body, want: c.Request.ContentLength}
	end, err := s.Images.UploadChunk(name, off, body)
	var oe *images.OffsetError
	var ce *images.ChunkError
	switch {
	case errors.As(err, &oe):
		c.Header(api.UploadOffsetHeader, strconv.FormatInt(oe.Want, 10))
		s.writeProblem(c, withField(errConflict, api.UploadOffsetHeader, err.Error()))
	case errors.As(err, &ce):
		// The client's fault: its body broke off. The upload is as it was.
		s.log.Info("upload chunk broke off", "upload", name, "offset", ce.Offset, "read", ce.Read, "declared", c.Request.ContentLength, "err", ce.Err)
		c.Header(api.UploadOffsetHeader, strconv.FormatInt(ce.Offset, 10))
		s.writeProblem(c, chunkProblem(ce, c.Request.ContentLength))
	case err != nil:
		c.Header(api.UploadOffsetHeader, strconv.FormatInt(end, 10))
		s.writeProblem(c, imageProblem(err))
	default:
		s.answerUpload(c, name, end)
	}
}

// chunkProblem is the refusal of a chunk whose body broke off after
// ce.Read of its declared bytes (-1: not declared).
func chunkProblem(ce *images.ChunkError, declared int64) *Problem {
	what := fmt.Sprintf("the chunk at offset %d broke off after %d bytes", ce.Offset, ce.Read)
	switch {
	case errors.Is(ce.Err, errBodyLonger):
		what = fmt.Sprintf("the chunk at offset %d goes on past its Content-Length of %d bytes", ce.Offset, declared)
	case declared >= 0:
		what = fmt.Sprintf("the chunk ended after %d of %d bytes (bytes %d-%d of the upload)", ce.Read, declared, ce.Offset, ce.Offset+max(declared-1, 0))
	}
	detail := fmt.Sprintf("%s: %v; the upload still ends at %d: send the chunk again from there", what, ce.Err, ce.Offset)
	if isTimeout(ce.Err) {
		return withField(errTimeout, "body", detail)
	}
	return withField(errBadRequest, "body", detail)
}

// errBodyLonger: a body that goes on past its Content-Length.
var errBodyLonger = errors.New("the body is longer than its Content-Length")

// declaredBody holds a chunk's body to its Content-Length (want; -1:
// none): one that ends short fails with io.ErrUnexpectedEOF, one that goes
// on with errBodyLonger. net/http does the same on a real connection; this
// says it whatever carries the request.
type declaredBody struct {
	r       io.Reader
	want, n int64
}

func (b *declaredBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.n += int64(n)
	switch {
	case b.want < 0:
	case b.n > b.want:
		return n, errBodyLonger
	case errors.Is(err, io.EOF) && b.n < b.want:
		return n, io.ErrUnexpectedEOF
	}
	return n, err
}

// contentRange is a chunk's optional Content-Range: bytes first-last
// (set: it was given).
type contentRange struct {
	set         bool
	first, last int64
	text        string
}

// parseContentRange reads "bytes FIRST-LAST/TOTAL" or "bytes
// FIRST-LAST/*"; "" is none.
func parseContentRange(h string) (contentRange, error) {
	if h == "" {
		return contentRange{}, nil
	}
	unit, spec, _ := strings.Cut(h, " ")
	rng, total, ok := strings.Cut(spec, "/")
	first, last, ok2 := strings.Cut(rng, "-")
	a, err1 := strconv.ParseInt(first, 10, 64)
	b, err2 := strconv.ParseInt(last, 10, 64)
	if unit != "bytes" || !ok || !ok2 || err1 != nil || err2 != nil || a < 0 || b < a {
		return contentRange{}, fmt.Errorf("%q: write bytes FIRST-LAST/TOTAL or bytes FIRST-LAST/*", clip(h, 80))
	}
	if total != "*" {
		if t, err := strconv.ParseInt(total, 10, 64); err != nil || t <= b {
			return contentRange{}, fmt.Errorf("%q: the total %q is not a number past the range's last byte", clip(h, 80), clip(total, 30))
		}
	}
	return contentRange{set: true, first: a, last: b, text: clip(h, 80)}, nil
}

// agrees checks the range against the chunk's offset and its
// Content-Length (-1: none).
func (r contentRange) agrees(offset, length int64) error {
	switch {
	case !r.set:
	case r.first != offset:
		return fmt.Errorf("%q starts at %d, %s at %d", r.text, r.first, api.UploadOffsetHeader, offset)
	case length >= 0 && r.last-r.first+1 != length:
		return fmt.Errorf("%q is %d bytes, the body's Content-Length %d", r.text, r.last-r.first+1, length)
	}
	return nil
}

func (s *Server) discardUpload(c *gin.Context) {
	name := c.Param("name")
	if err := s.Images.DiscardUpload(name); err != nil {
		s.writeProblem(c, imageProblem(err))
		return
	}
	s.answerUpload(c, name, 0)
}

func (s *Server) requireImages(c *gin.Context) {
	if s.Images == nil {
		s.writeProblem(c, with(errUnavailable, "this gpuvmd keeps no images (it has no storage pool)"))
		return
	}
	c.Next()
}

func (s *Server) listImages(c *gin.Context) {
	entries, err := s.Images.List(c.Request.Context())
	if err != nil {
		s.writeProblem(c, err)
		return
	}
	recs := make([]store.Image, len(entries))
	for i, e := range entries {
		recs[i] = e.Image
	}
	admin := user(c).Admin
	profiles := images.ProfilesUsing(s.config(), recs)
	out := api.ImageList{Items: make([]api.Image, 0, len(entries))}
	for _, e := range entries {
		img := toAPIImage(&e.Image, admin)
		if admin {
			img.Profiles, img.VMs, img.VMCount = profiles[e.ID], e.VMs, len(e.VMs)
		}
		out.Items = append(out.Items, img)
	}
	c.JSON(http.StatusOK, out)
}

func toAPIImage(r *store.Image, admin bool) api.Image {
	img := api.Image{Name: r.Name, Version: r.Version, OS: r.OS, Firmware: r.Firmware, Format: r.Format, VirtualSize: r.VirtualSize}
	if admin {
		at := r.CreatedAt
		img.ActualSize, img.SHA256, img.Pool, img.Volume, img.Origin = r.ActualSize, r.SHA256, r.Pool, r.Volume, r.Origin
		img.SourcePath, img.SourceVM, img.CreatedBy, img.CreatedAt = r.SourcePath, r.SourceVM, r.CreatedBy, &at
	}
	return img
}

func (s *Server) importImage(c *gin.Context) {
	var req api.ImportImageRequest
	if !s.decodeJSON(c, &req) {
		return
	}
	switch {
	case strings.TrimSpace(req.SourcePath) == "" && !req.Upload:
		s.writeProblem(c, withField(errBadRequest, "source_path", "name the file to import: an absolute path on the gpuvmd host (or upload it and say upload: true)"))
		return
	case strings.TrimSpace(req.Name) == "":
		s.writeProblem(c, withField(errBadRequest, "name", "name the image"))
		return
	case strings.TrimSpace(req.OS) == "":
		s.writeProblem(c, withField(errBadRequest, "os", "say the image's OS: linux or windows"))
		return
	}
	if err := images.CheckName(req.Name); err != nil {
		s.writeProblem(c, imageProblem(err))
		return
	}
	auditTarget(c, "image/"+req.Name)
	img, err := s.Images.Import(c.Request.Context(), images.ImportRequest{Source: req.SourcePath, Name: req.Name, OS: req.OS,
		Firmware: req.Firmware, SHA256: req.SHA256, By: user(c).Name, Upload: req.Upload})
	if err != nil {
		s.writeProblem(c, s.importProblem(err, req))
		return
	}
	auditTarget(c, "image/"+store.ImageRef(img.Name, img.Version))
	c.JSON(http.StatusCreated, toAPIImage(img, true))
}

func (s *Server) publishImage(c *gin.Context) {
	var req api.PublishImageRequest
	if !s.decodeJSON(c, &req) {
		return
	}
	switch {
	case strings.TrimSpace(req.VM) == "":
		s.writeProblem(c, withField(errBadRequest, "vm", "name the stopped VM whose disk to publish"))
		return
	case strings.TrimSpace(req.Name) == "":
		s.writeProblem(c, withField(errBadRequest, "name", "name the image"))
		return
	}
	if err := images.CheckName(req.Name); err != nil {
		s.writeProblem(c, imageProblem(err))
		return
	}
	vm, ok := s.lookupVM(c, req.VM)
	if !ok {
		return
	}
	ctx := c.Request.Context()
	// OS and firmware: the request's, else the image's newest version's,
	// else the VM's profile's.
	if req.OS == "" || req.Firmware == "" {
		osFamily, firmware := "", ""
		if cur, err := s.Images.Get(ctx, req.Name, 0); err == nil {
			osFamily, firmware = cur.OS, cur.Firmware
		} else if p := s.config().Profiles[vm.Profile]; p != nil {
			osFamily, firmware = p.OS, p.Firmware
		}
		req.OS, req.Firmware = cmpOr(req.OS, osFamily), cmpOr(req.Firmware, firmware)
	}
	if req.OS == "" {
		s.writeProblem(c, withField(errBadRequest, "os", "the VM's profile is gone and the image is new: say its OS (linux or windows)"))
		return
	}
	img, err := s.Images.Publish(ctx, images.PublishRequest{VMID: vm.ID, Name: req.Name, OS: req.OS, Firmware: req.Firmware, By: user(c).Name})
	if err != nil {
		s.writeProblem(c, imageProblem(err))
		return
	}
	auditTarget(c, "image/"+store.ImageRef(img.Name, img.Version))
	c.JSON(http.StatusCreated, toAPIImage(img, true))
}

func (s *Server) deleteImage(c *gin.Context) {
	ref := c.Param("ref")
	name, version, err := parseImageRef(ref)
	if err != nil {
		s.writeProblem(c, withField(errBadRequest, "ref", err.Error()))
		return
	}
	done, err := s.Images.Delete(c.Request.Context(), name, version)
	out := api.DeletedImages{Deleted: []api.Image{}}
	for i := range done {
		out.Deleted = append(out.Deleted, toAPIImage(&done[i], true))
	}
	if err != nil {
		if len(done) > 0 {
			s.log.Warn("image delete stopped half-way", "image", ref, "deleted", len(done), "err", err)
		}
		s.writeProblem(c, imageProblem(err))
		return
	}
	c.JSON(http.StatusOK, out)
}

// parseImageRef reads NAME or NAME@VERSION (version 0: every version).
func parseImageRef(ref string) (string, int, error) {
	name, v, hasVersion := strings.Cut(ref, "@")
	if name == "" {
		return "", 0, fmt.Errorf("%q: write NAME or NAME@VERSION", clip(ref, 80))
	}
	if !hasVersion {
		return name, 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return "", 0, fmt.Errorf("%q: the version after @ is a number from 1", clip(ref, 80))
	}
	return name, n, nil
}

// importProblem maps an import's errors to problems: those of the source
// name the field that gave it; the storage pool's are the server's.
func (s *Server) importProblem(err error, req api.ImportImageRequest) error {
	src := "source_path"
	if req.Upload {
		src = "upload"
	}
	var fe *images.FieldError
	switch {
	case errors.As(err, &fe):
	case errors.Is(err, images.ErrChecksum):
		return withField(errValidation, "sha256", err.Error())
	case errors.Is(err, images.ErrSourceChanged):
		return withField(errValidation, src, err.Error())
	case errors.Is(err, images.ErrStorage):
		// The route is an admin's, who needs libvirt's reason to fix the
		// pool.
		s.log.Error("image import failed in the storage pool", "image", req.Name, "err", err)
		if hypervisor.IsDisconnected(err) {
			return with(errUnavailable, err.Error())
		}
		return with(errInternal, err.Error())
	}
	return imageProblem(err)
}

// imageProblem maps the images package's errors to problems.
func imageProblem(err error) error {
	detail := err.Error()
	var fe *images.FieldError
	switch {
	case errors.As(err, &fe):
		return withField(errValidation, fe.Field, detail)
	case errors.Is(err, store.ErrNotFound):
		return with(errNotFound, detail)
	case errors.Is(err, store.ErrConflict):
		// A *store.ImageInUseError names the VMs.
		return with(errConflict, detail)
	case errors.Is(err, images.ErrInvalid):
		return with(errValidation, detail)
	default:
		return err
	}
}
