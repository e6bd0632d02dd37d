package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/client"
	"github.com/gpuvm/gpuvm/pkg/config"
)

// newAdminImagesCmd is `gpuvm admin images` (the list) and `gpuvm admin
// image import|publish|delete`.
func newAdminImagesCmd(o *clientOpts) []*cobra.Command {
	var out outputOpts
	list := &cobra.Command{
		Use:   "images",
		Short: "List the stored disk images, every version, with the profiles and VMs that use each",
		Long: `Lists the images imported with 'gpuvm admin image import' or published with
'gpuvm admin image publish': name@version, OS, firmware, format, virtual
size, SHA-256, the profiles whose disk the configuration makes on that
version (an image block with imported = NAME, pinned with version or
following the newest) and how many live VMs' disks are made on it.

Output: a table by default; --json prints the api.ImageList; --quiet the
NAME@VERSION references.
` + exitHelp,
		Args: noArgs,
		RunE: o.runE(func(ctx context.Context, c *client.Client, cmd *cobra.Command, _ []string) error {
			if err := out.check(); err != nil {
				return err
			}
			l, err := c.Images(ctx)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			switch {
			case out.json:
				return writeJSON(w, l)
			case out.quiet:
				for _, img := range l.Items {
					fmt.Fprintf(w, "%s@%d\n", img.Name, img.Version)
				}
				return nil
			}
			return printImages(w, l)
		}),
	}
	out.flags(list, "print NAME@VERSION only")

	image := &cobra.Command{
		Use:   "image",
		Short: "Import, publish and delete stored disk images",
		Long: `Stored images live as volumes of the server's libvirt storage pool and are
recorded in its database; an image block of the configuration uses one
with imported = "NAME" (docs/images.md).`,
		Args: noArgs,
	}
	image.AddCommand(newImageImportCmd(o), newImagePublishCmd(o), newImageDeleteCmd(o))
	return []*cobra.Command{list, image}
}

func printImages(w io.Writer, l *api.ImageList) error {
	if len(l.Items) == 0 {
		_, err := fmt.Fprintln(w, "No images. Import one with: gpuvm admin image import FILE --name NAME --os linux")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "IMAGE\tOS\tFIRMWARE\tFORMAT\tSIZE\tON DISK\tSHA-256\tORIGIN\tPROFILES\tVMS")
	for _, img := range l.Items {
		origin := img.Origin
		switch {
		case img.Origin == "publish" && img.SourceVM != "":
			origin = "published from " + img.SourceVM
		case img.Origin == "import":
			origin = "imported by " + img.CreatedBy
		}
		sum := img.SHA256
		if len(sum) > 12 {
			sum = sum[:12] + "…"
		}
		fmt.Fprintf(tw, "%s@%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\n", img.Name, img.Version, img.OS, img.Firmware, img.Format,
			config.FormatSize(uint64(img.VirtualSize)), config.FormatSize(uint64(img.ActualSize)), orDash(sum), orDash(origin),
			orDash(strings.Join(img.Profiles, ",")), len(img.VMs))
	}
	return tw.Flush()
}

// longCalls lifts the client's request timeout for a call that copies a
// disk: it waits as long as the copy takes (Ctrl-C gives up, and the
// server removes what it had copied).
func longCalls(c *client.Client) {
	h := http.Client{}
	if c.HTTP != nil {
		h = *c.HTTP
	}
	h.Timeout = 0
	c.HTTP = &h
}

func newImageImportCmd(o *clientOpts) *cobra.Command {
	var out outputOpts
	var req api.ImportImageRequest
	var upload bool
	cmd := &cobra.Command{
		Use:   "import SOURCE --name NAME --os linux|windows [--firmware uefi|bios] [--sha256 SUM] [--upload]",
		Short: "Import a qcow2, raw or ISO file on the server's host as a new image",
		Long: `Imports SOURCE, an absolute path of a file on the gpuvmd host (not this
machine: the server reads it), as version 1 of a new image NAME. gpuvmd
streams it into its storage pool through libvirt, computing its SHA-256
as it copies, then reads the copy's format (qcow2, raw or ISO; never from
the file's name) and virtual size with qemu-img.

Nothing is stored (no volume, no record) when --sha256 is given and the
copy's differs, when the format is another (VMDK, VHD: qemu-img convert
it first) or a qcow2 overlay, when NAME is taken (publish a VM to add a
version), or when SOURCE changes or vanishes while it is copied.

With --upload, SOURCE is a file of this machine instead: it is sent to the
server in chunks of 16 MiB with its progress on stderr, and an upload cut
short (a lost connection, Ctrl-C) goes on from where the server's copy ends
when the same command is run again. Its SHA-256, computed here, is what the
server's copy must have; the server imports the upload and removes it.

The command waits until the copy is done; it can take minutes for a large
image.

Output: a line by default; --json prints the api.Image; --quiet NAME@VERSION.
` + exitHelp,
		Args: exactArgs(1, "the source file on the server's host"),
		RunE: o.runE(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			if err := out.check(); err != nil {
				return err
			}
			if req.Name == "" || req.OS == "" {
				return usageError{fmt.Errorf("--name and --os (linux or windows) are required")}
			}
			req.SHA256 = strings.ToLower(req.SHA256)
			if upload {
				sum, err := uploadFile(ctx, c, cmd.ErrOrStderr(), args[0], req.Name, req.SHA256)
				if err != nil {
					return err
				}
				req.SHA256, req.Upload = sum, true // the server checks what it got against what was sent
			} else {
				if !filepath.IsAbs(args[0]) {
					return usageError{fmt.Errorf("SOURCE %q must be an absolute path on the server's host (or add --upload to send a file of this machine)", args[0])}
				}
				req.SourcePath = args[0]
			}
			longCalls(c)
			img, err := c.ImportImage(ctx, req)
			if err != nil {
				return err
			}
			return printStored(cmd.OutOrStdout(), out, img, "Imported")
		}),
	}
	cmd.Flags().StringVar(&req.Name, "name", "", "the image's name (required)")
	cmd.Flags().StringVar(&req.OS, "os", "", "the guest OS: linux or windows (required)")
	cmd.Flags().StringVar(&req.Firmware, "firmware", "uefi", "uefi or bios")
	cmd.Flags().StringVar(&req.SHA256, "sha256", "", "the SHA-256 the file must have (hex)")
	cmd.Flags().BoolVar(&upload, "upload", false, "SOURCE is a file of this machine: send it to the server (resumable), then import it")
	out.flags(cmd, "print NAME@VERSION only")
	return cmd
}

func printStored(w io.Writer, out outputOpts, img *api.Image, verb string) error {
	switch {
	case out.json:
		return writeJSON(w, img)
	case out.quiet:
		_, err := fmt.Fprintf(w, "%s@%d\n", img.Name, img.Version)
		return err
	}
	_, err := fmt.Fprintf(w, "%s %s@%d: %s %s, %s (%s on disk), sha256 %s, volume %s in pool %s.\n", verb, img.Name, img.Version,
		img.OS, img.Format, config.FormatSize(uint64(img.VirtualSize)), config.FormatSize(uint64(img.ActualSize)), img.SHA256, img.Volume, img.Pool)
	return err
}

func newImagePublishCmd(o *clientOpts) *cobra.Command {
	var out outputOpts
	var req api.PublishImageRequest
	cmd := &cobra.Command{
		Use:   "publish VM --name NAME [--os linux|windows] [--firmware uefi|bios]",
		Short: "Turn a stopped VM's disk into the next version of an image",
		Long: `Publishes the disk of VM (its ID, or its name among your VMs), which must
be stopped, as the next version of image NAME (version 1 of a new one):
the VM's overlay and its whole backing chain are flattened into one
standalone qcow2 volume of the storage pool. Profiles whose image block
follows the newest version of NAME use it for their next VMs; those that
pin a version keep theirs.

--os and --firmware default to the newest version's, else to the VM's
profile's.

Output: a line by default; --json prints the api.Image; --quiet NAME@VERSION.
` + exitHelp,
		Args: exactArgs(1, "the VM"),
		RunE: o.runE(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			if err := out.check(); err != nil {
				return err
			}
			if req.Name == "" {
				return usageError{fmt.Errorf("--name is required: the image to publish the VM's disk as")}
			}
			req.VM = args[0]
			longCalls(c)
			img, err := c.PublishImage(ctx, req)
			if err != nil {
				return err
			}
			return printStored(cmd.OutOrStdout(), out, img, "Published")
		}),
	}
	cmd.Flags().StringVar(&req.Name, "name", "", "the image's name (required)")
	cmd.Flags().StringVar(&req.OS, "os", "", "the guest OS: linux or windows")
	cmd.Flags().StringVar(&req.Firmware, "firmware", "", "uefi or bios")
	out.flags(cmd, "print NAME@VERSION only")
	return cmd
}

func newImageDeleteCmd(o *clientOpts) *cobra.Command {
	var out outputOpts
	var yes bool
	cmd := &cobra.Command{
		Use:   "delete NAME[@VERSION] --yes",
		Short: "Delete a version of an image, or every version, with its volume",
		Long: `Deletes NAME@VERSION, or with NAME alone every version of the image, and
the volumes they are stored in. It is refused (and nothing is deleted)
while a live VM's disk is made on one of them; the error names the VMs.
A profile that still names the image fails to create VMs afterwards, and
the next configuration load warns about it. --yes is required.

Output: a line per version by default; --json prints the api.DeletedImages;
--quiet NAME@VERSION per version.
` + exitHelp,
		Args: exactArgs(1, "NAME or NAME@VERSION"),
		RunE: o.runE(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			if err := out.check(); err != nil {
				return err
			}
			if !yes {
				return usageError{fmt.Errorf("deleting an image cannot be undone: add --yes")}
			}
			gone, err := c.DeleteImage(ctx, args[0])
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if out.json {
				return writeJSON(w, gone)
			}
			for _, img := range gone.Deleted {
				if out.quiet {
					fmt.Fprintf(w, "%s@%d\n", img.Name, img.Version)
				} else {
					fmt.Fprintf(w, "Deleted %s@%d (volume %s).\n", img.Name, img.Version, img.Volume)
				}
			}
			return nil
		}),
	}
	cmd.Flags().BoolVar(&yes, "yes", false, "confirm the deletion")
	out.flags(cmd, "print NAME@VERSION only")
	return cmd
}

// uploadChunk is the size of one PUT of an upload.
const uploadChunk = 16 << 20

// uploadFile sends path as the upload for image name, from where the
// server's copy ends, printing its progress to progress; it returns the
// file's SHA-256, which must be want when want is set (else nothing is
// sent).
func uploadFile(ctx context.Context, c *client.Client, progress io.Writer, path, name, want string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", err
	}
	if !st.Mode().IsRegular() || st.Size() == 0 {
		return "", fmt.Errorf("%s is not a non-empty regular file", path)
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("reading %s: %w", path, err)
	}
	sum := hex.EncodeToString(h.Sum(nil))
	if want != "" && want != sum {
		return "", fmt.Errorf("%s has SHA-256 %s, not %s: nothing sent, nothing imported", path, sum, want)
	}
	off, err := c.UploadOffset(ctx, name)
	if err != nil {
		return "", err
	}
	if off > st.Size() {
		// Another file's upload under this name: start again.
		fmt.Fprintf(progress, "The server holds %s for %s, more than %s has: starting again.\n", config.FormatSize(uint64(off)), name, path)
		if err := c.DiscardUpload(ctx, name); err != nil {
			return "", err
		}
		off = 0
	}
	if off > 0 {
		fmt.Fprintf(progress, "Resuming the upload of %s at %s of %s.\n", path, config.FormatSize(uint64(off)), config.FormatSize(uint64(st.Size())))
	}
	buf := make([]byte, uploadChunk)
	for off < st.Size() {
		n, err := f.ReadAt(buf, off)
		if err != nil && err != io.EOF {
			return "", fmt.Errorf("reading %s: %w", path, err)
		}
		if off, err = c.UploadChunk(ctx, name, off, buf[:n]); err != nil {
			return "", fmt.Errorf("uploading %s (run the command again to go on): %w", path, err)
		}
		fmt.Fprintf(progress, "\rUploaded %s of %s (%d%%)", config.FormatSize(uint64(off)), config.FormatSize(uint64(st.Size())), off*100/st.Size())
	}
	fmt.Fprintln(progress)
	return sum, nil
}
