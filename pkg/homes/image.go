package homes

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpuvm/gpuvm/pkg/hostmount"
	"github.com/gpuvm/gpuvm/pkg/quota"
)

// Image homes. Where the homes' filesystem has no project quotas
// (pkg/quota), a home with a quota is made as a filesystem of its own: an
// ext4 image of the quota's size, <root>/.images/<login>.ext4, loop-mounted
// on the home's directory (nosuid, nodev). The kernel refuses writes past
// it (ENOSPC, "No space left on device"), wherever they come from, a VM's
// virtiofs daemon included, and a VM can never fill the host's disk: the
// image is sparse, and never grows past its size.
//
// The image is the home: a home whose image exists is mounted again
// wherever it is found unmounted (a VM's start, the quota rounds; after a
// reboot nothing mounts it before). An image is made under a temporary
// name and renamed once its filesystem is made, so one cut short is made
// again, never mounted half-made. A quota raised grows the image: at once
// where the kernel lets a mounted ext4 grow (resize2fs on the loop device,
// which needs CAP_SYS_RESOURCE), else the next time it is mounted; a quota
// lowered does not shrink it (that would need it unmounted, checked and
// its files fitting), which Image says. A home made as a plain directory
// (before its person had a quota, or where images cannot be made) stays
// one: gpuvm never moves a person's files on its own.

// ImagesDir is the directory beside the homes, under their root, that
// holds the image homes' images. Its name starts with a dot, as LocksDir's:
// never a person's.
const ImagesDir = ".images"

// MinImage is the smallest image made: ext4's journal and tables need a
// few MiB; a smaller quota gets an image this big.
const MinImage = 16 << 20

// ImageSize is the size of the image a quota of q bytes makes: at least
// MinImage, in whole 4 KiB blocks.
func ImageSize(q uint64) uint64 { return max(q, MinImage) &^ 4095 }

// imageTools are the programs image homes run.
var imageTools = []string{"mkfs.ext4", "e2fsck", "resize2fs", "dumpe2fs", "mount", "umount", "losetup"}

// ErrBusy: an image home's filesystem could not be unmounted, something
// (a VM's virtiofs daemon, a shell on the host) having a file open in it.
var ErrBusy = hostmount.ErrBusy

// ErrNoImages wraps why image homes cannot be made under a root.
var ErrNoImages = errors.New("homes cannot be made as filesystem images here")

// ImageSupport is nil where image homes can be made under root, else an
// error wrapping ErrNoImages that says why: gpuvmd is not root (it could
// not mount them), the kernel has no loop devices, a program is missing,
// or the homes root is on a filesystem shared between hosts (an ext4
// image mounted by two nodes at once is corrupted).
func ImageSupport(root string) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("%w: gpuvmd is not root and cannot mount them", ErrNoImages)
	}
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		return fmt.Errorf("%w: the kernel has no loop devices (/dev/loop-control: %v)", ErrNoImages, err)
	}
	for _, p := range imageTools {
		if _, err := exec.LookPath(p); err != nil {
			return fmt.Errorf("%w: %s is missing (Debian: e2fsprogs, mount)", ErrNoImages, p)
		}
	}
	dir := filepath.Clean(root)
	for {
		if _, err := os.Stat(dir); err == nil || dir == "/" {
			break
		}
		dir = filepath.Dir(dir)
	}
	if name, shared := sharedFS(dir); shared {
		return fmt.Errorf("%w: the homes root %s is on %s, shared between hosts: an image mounted by two at once would be corrupted", ErrNoImages, root, name)
	}
	if err := trialMount(); err != nil {
		return fmt.Errorf("%w: a trial image could not be made and mounted (%v)", ErrNoImages, err)
	}
	return nil
}

// trialMount makes, mounts and removes a small image once per process,
// in a temporary directory: a kernel or a container that refuses loop
// mounts is found here, not at a person's VM's start.
var trialMount = sync.OnceValue(func() error {
	dir, err := os.MkdirTemp("", "gpuvm-image-trial-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	img, mnt := filepath.Join(dir, "trial.ext4"), filepath.Join(dir, "mnt")
	if err := makeImage(ctx, img, MinImage, 1); err != nil {
		return err
	}
	if err := os.Mkdir(mnt, 0o700); err != nil {
		return err
	}
	if err := mountImage(ctx, img, mnt); err != nil {
		return err
	}
	return hostmount.Unmount(ctx, mnt, false)
})

// mountImage loop-mounts img at dir (nosuid, nodev), where mounts are
// made: in the host's mount namespace, where libvirtd starts the virtiofs
// daemons (pkg/hostmount).
func mountImage(ctx context.Context, img, dir string) error {
	if err := hostmount.Run(ctx, "mount", "-t", "ext4", "-o", "loop,nosuid,nodev", img, dir); err != nil {
		return fmt.Errorf("mount the home's image: %w", err)
	}
	return nil
}

// imageFile is login's image under root.
func imageFile(root, login string) string {
	return filepath.Join(filepath.Clean(root), ImagesDir, login+".ext4")
}

// Image is a mounted image home as it is: the image file's size (the
// most the home may take of the host's disk) and what its filesystem
// counts: Used, and Capacity, what its person can hold (used and
// available: its own bookkeeping, the journal and inode tables above all,
// is not in it).
type Image struct {
	Size, Used, Capacity uint64
}

// ImageOf says whether login's home under root is an image home, and what
// it is. An image home found unmounted is mounted (with the home held),
// and grown first to the image of quota want when that is larger (0: as
// it is).
func ImageOf(ctx context.Context, root, login string, want uint64, log *slog.Logger) (Image, bool, error) {
	dir, err := Path(root, login)
	if err != nil {
		return Image{}, false, err
	}
	img := imageFile(root, login)
	if _, err := os.Lstat(img); errors.Is(err, fs.ErrNotExist) {
		return Image{}, false, nil
	}
	unlock, err := lockHome(root, login, dir, false)
	if err != nil {
		return Image{}, true, err
	}
	defer unlock()
	if err := keepImage(ctx, img, dir, want, log); err != nil {
		return Image{}, true, err
	}
	fi, err := os.Stat(img)
	if err != nil {
		return Image{}, true, fmt.Errorf("image %s: %w", img, err)
	}
	im := Image{Size: uint64(fi.Size())}
	im.Used, im.Capacity, err = fsUsage(dir)
	return im, true, err
}

// makeImage makes an image home's image of size bytes (at least
// MinImage) whose filesystem's root belongs to uid:uid: a sparse file
// under a temporary name, mkfs.ext4 on it (no blocks reserved for root:
// the home is all its person's), then renamed to img.
func makeImage(ctx context.Context, img string, size uint64, uid int) error {
	if err := os.MkdirAll(filepath.Dir(img), 0o700); err != nil {
		return fmt.Errorf("images directory: %w", err)
	}
	tmp := img + ".making"
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC|noFollow, 0o600)
	if err != nil {
		return fmt.Errorf("make image %s: %w", tmp, err)
	}
	err = f.Truncate(int64(ImageSize(size)))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		owner := strconv.Itoa(uid) + ":" + strconv.Itoa(uid)
		err = run(ctx, "mkfs.ext4", "-q", "-F", "-m", "0", "-L", "gpuvm-home", "-E", "root_owner="+owner, tmp)
	}
	if err == nil {
		err = os.Rename(tmp, img)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("make the home's image: %w", err)
	}
	return nil
}

// keepImage mounts img at dir when it is not, grown beforehand to the
// image of quota want (0: as it is) when that is larger; a mounted one is
// grown in place where the kernel allows it, else at its next mount (a
// warning says so). On return without an error it is mounted.
func keepImage(ctx context.Context, img, dir string, want uint64, log *slog.Logger) error {
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("home's mount point: %w", err)
	}
	mounted, err := hostmount.Mounted(dir)
	if err != nil {
		return err
	}
	fi, err := os.Stat(img)
	if err != nil {
		return fmt.Errorf("image %s: %w", img, err)
	}
	if want > 0 {
		want = ImageSize(want)
	}
	grow := want > uint64(fi.Size())
	switch {
	case mounted && grow:
		if err := growMounted(ctx, img, want); err != nil {
			log.Warn("the home's image is not grown while it is mounted; it grows the next time it is mounted (no VM of its person running)",
				"image", img, "bytes", want, "err", err)
		}
		return nil
	case mounted:
		return nil
	case want > 0 && fsBytes(ctx, img) < want:
		// A growth that fails leaves the home mounted at its size: its
		// person gets it, and the growth is tried again at its next
		// mount (the filesystem's size, not the file's, is compared: a
		// growth cut short after the file grew is finished then).
		if err := growUnmounted(ctx, img, want); err != nil {
			log.Warn("the home's image is not grown to its quota now; it is mounted at its size and grown at its next mount", "image", img, "bytes", want, "err", err)
		} else {
			log.Info("home's image grown to its quota", "image", img, "bytes", want)
		}
	}
	return mountImage(ctx, img, dir)
}

// growUnmounted grows an unmounted image's filesystem to want bytes:
// resize2fs grows an unmounted ext4 only once e2fsck -f has checked it.
// The check comes first, then the file (never shrunk), then the
// filesystem.
func growUnmounted(ctx context.Context, img string, want uint64) error {
	// e2fsck -p: 1 is "errors corrected"; 2 and above are refusals.
	if err := run(ctx, "e2fsck", "-f", "-p", img); err != nil && exitCode(err) != 1 {
		return fmt.Errorf("check the home's image before it grows: %w", err)
	}
	if fi, err := os.Stat(img); err != nil || uint64(fi.Size()) < want {
		if err := os.Truncate(img, int64(want)); err != nil {
			return fmt.Errorf("grow the home's image: %w", err)
		}
	}
	if err := run(ctx, "resize2fs", img); err != nil {
		return fmt.Errorf("grow the home's filesystem: %w", err)
	}
	return nil
}

// fsBytes is the size of the ext4 filesystem in the unmounted image img
// (dumpe2fs -h: its block count times its block size), or the file's
// size when it cannot be read.
func fsBytes(ctx context.Context, img string) uint64 {
	out, err := output(ctx, "dumpe2fs", "-h", img)
	var count, size uint64
	for _, line := range strings.Split(out, "\n") {
		k, v, ok := strings.Cut(line, ":")
		n, perr := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		switch {
		case !ok || perr != nil:
		case k == "Block count":
			count = n
		case k == "Block size":
			size = n
		}
	}
	if err != nil || count == 0 || size == 0 {
		if fi, err := os.Stat(img); err == nil {
			return uint64(fi.Size())
		}
		return 0
	}
	return count * size
}

// growMounted grows a mounted image in place: the file, the loop
// device's idea of its size (losetup -c), then the filesystem (resize2fs
// on the device: the kernel's online resize).
func growMounted(ctx context.Context, img string, want uint64) error {
	out, err := output(ctx, "losetup", "-j", img)
	dev, _, ok := strings.Cut(out, ":")
	if err != nil || !ok {
		return fmt.Errorf("the loop device of %s: %v %s", img, err, out)
	}
	fi, err := os.Stat(img)
	if err != nil {
		return err
	}
	if err := os.Truncate(img, int64(want)); err != nil {
		return err
	}
	err = run(ctx, "losetup", "-c", dev)
	if err == nil {
		err = run(ctx, "resize2fs", dev)
	}
	if err != nil {
		// The filesystem kept its size: so does the file, so that the
		// next mount sees it smaller than the quota and grows it then.
		if terr := os.Truncate(img, fi.Size()); terr != nil {
			return errors.Join(err, terr)
		}
		return errors.Join(err, run(context.WithoutCancel(ctx), "losetup", "-c", dev))
	}
	return nil
}

// removeImage unmounts an image home, deletes its image, then its mount
// point and whatever was written under it while it was unmounted (Remove,
// with the home held). A busy filesystem (something still has a file open
// in it) is ErrBusy, nothing removed.
func removeImage(img, dir, login string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := hostmount.Unmount(ctx, dir, false); err != nil {
		return fmt.Errorf("remove the home of %s: unmount its image: %w", login, err)
	}
	if err := os.Remove(img); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove the home of %s: %w", login, err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove the home of %s: %w", login, err)
	}
	return nil
}

func run(ctx context.Context, name string, args ...string) error {
	_, err := output(ctx, name, args...)
	return err
}

// output runs a program and returns what it printed; its error names the
// program and carries what it said.
func output(ctx context.Context, name string, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	s := strings.TrimSpace(string(out))
	if err != nil {
		return s, fmt.Errorf("%s: %w: %s", name, err, s)
	}
	return s, nil
}

func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	return -1
}

// QuotaEnforcement is how home quotas hold under root: the filesystem's
// project quotas where it has them (probe, quota.Probe), else image homes
// where they can be made (images, ImageSupport), else none, with why.
func QuotaEnforcement(root string, probe func(string) (quota.Enforcement, error), images func(string) error) quota.Enforcement {
	enf, err := probe(root)
	if err != nil {
		enf = quota.Enforcement{Mode: quota.None, Why: err.Error()}
	}
	if enf.Mode == quota.Project {
		return enf
	}
	if err := images(root); err != nil {
		enf.Why += "; " + err.Error()
		return enf
	}
	return quota.Enforcement{Mode: quota.Image, FSType: enf.FSType, Why: enf.Why}
}
