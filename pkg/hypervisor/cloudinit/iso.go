package cloudinit

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"sort"
	"strings"
	"time"
	"unicode/utf16"
)

// File is a file in the root directory of an ISO image.
type File struct {
	Name string // "user-data"
	Data []byte
}

const (
	sector     = 2048
	padSectors = 150
)

// ISO writes an ISO 9660 image holding files in its root directory, with
// volume identifier label. It is the minimum a NoCloud seed needs, readable
// by every reader cloud-init and cloudbase-init meet:
//
//   - the primary volume descriptor with ISO 9660 level 1 names (8.3,
//     upper case: "USER_DAT.;1");
//   - Rock Ridge (SUSP "SP" and "ER", "PX" modes and "NM" names) on those
//     records, so Linux sees "user-data" with mode 0444;
//   - a Joliet supplementary volume descriptor and directory with the same
//     names in UCS-2, for Windows and for readers without Rock Ridge;
//   - 300 KiB of padding at the end, as genisoimage writes.
//
// Names may hold at most 64 characters of printable ASCII without '/'.
// mtime stamps every record; pass a fixed time for a reproducible image.
func ISO(label string, files []File, mtime time.Time) ([]byte, error) {
	if label == "" || len(label) > 32 {
		return nil, fmt.Errorf("iso: volume label %q: want 1 to 32 characters", label)
	}
	for _, r := range label {
		if r < 0x21 || r > 0x7e {
			return nil, fmt.Errorf("iso: volume label %q: printable ASCII only", label)
		}
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("iso: no files")
	}
	seen := map[string]bool{}
	for _, f := range files {
		if f.Name == "" || len(f.Name) > 64 || f.Name == "." || f.Name == ".." {
			return nil, fmt.Errorf("iso: file name %q: want 1 to 64 characters", f.Name)
		}
		for _, r := range f.Name {
			if r < 0x20 || r > 0x7e || r == '/' || r == ';' {
				return nil, fmt.Errorf("iso: file name %q: printable ASCII without '/' and ';' only", f.Name)
			}
		}
		if seen[f.Name] {
			return nil, fmt.Errorf("iso: file %q given twice", f.Name)
		}
		seen[f.Name] = true
		if uint64(len(f.Data)) > 1<<31 {
			return nil, fmt.Errorf("iso: file %q is larger than 2 GiB", f.Name)
		}
	}
	mtime = mtime.UTC()

	// Names in each hierarchy, sorted by identifier as ECMA-119 §9.3 asks.
	type entry struct {
		file    File
		primary string // "USER_DAT.;1"
		joliet  []byte // UCS-2 big-endian "user-data;1"
		extent  uint32
	}
	entries := make([]*entry, len(files))
	used := map[string]bool{}
	for i, f := range files {
		entries[i] = &entry{file: f, primary: level1Name(f.Name, used), joliet: ucs2(f.Name + ";1")}
	}

	// Layout: system area, PVD, SVD, terminator, four path tables (one
	// sector each), the two root directories, then file data.
	const (
		pvdSector    = 16
		svdSector    = 17
		termSector   = 18
		lPathPrimary = 19
		mPathPrimary = 20
		lPathJoliet  = 21
		mPathJoliet  = 22
		rootPrimary  = 23
	)
	primaryRecords := func(rootExtent, rootSize uint32) [][]byte {
		recs := [][]byte{
			dirRecord([]byte{0}, rootExtent, rootSize, true, mtime, rootSystemUse()),
			dirRecord([]byte{1}, rootExtent, rootSize, true, mtime, rrEntries(0o040555, "")),
		}
		byName := append([]*entry(nil), entries...)
		sort.Slice(byName, func(i, j int) bool { return byName[i].primary < byName[j].primary })
		for _, e := range byName {
			recs = append(recs, dirRecord([]byte(e.primary), e.extent, uint32(len(e.file.Data)), false, mtime, rrEntries(0o100444, e.file.Name)))
		}
		return recs
	}
	jolietRecords := func(rootExtent, rootSize uint32) [][]byte {
		recs := [][]byte{
			dirRecord([]byte{0}, rootExtent, rootSize, true, mtime, nil),
			dirRecord([]byte{1}, rootExtent, rootSize, true, mtime, nil),
		}
		byName := append([]*entry(nil), entries...)
		sort.Slice(byName, func(i, j int) bool { return bytes.Compare(byName[i].joliet, byName[j].joliet) < 0 })
		for _, e := range byName {
			recs = append(recs, dirRecord(e.joliet, e.extent, uint32(len(e.file.Data)), false, mtime, nil))
		}
		return recs
	}
	// Directory sizes do not depend on extents: measure with zeros.
	primarySize := dirSize(primaryRecords(0, 0))
	jolietSize := dirSize(jolietRecords(0, 0))
	rootJoliet := uint32(rootPrimary + primarySize/sector)
	next := rootJoliet + jolietSize/sector
	for _, e := range entries {
		e.extent = next
		next += uint32((len(e.file.Data) + sector - 1) / sector)
		if len(e.file.Data) == 0 {
			e.extent = 0 // an empty file has no extent
		}
	}
	// Pad as genisoimage does (150 sectors, 300 KiB): CD drives read ahead
	// past the last file, and some probes read a fixed 68 KiB from the
	// start (busybox's volume_id, behind findfs LABEL=cidata, finds nothing
	// on a smaller image).
	total := next + padSectors

	img := make([]byte, int(total)*sector)
	put := func(sec uint32, b []byte) { copy(img[int(sec)*sector:], b) }

	put(rootPrimary, packDir(primaryRecords(rootPrimary, primarySize)))
	put(rootJoliet, packDir(jolietRecords(rootJoliet, jolietSize)))
	for _, e := range entries {
		if len(e.file.Data) > 0 {
			put(e.extent, e.file.Data)
		}
	}
	put(lPathPrimary, pathTable(rootPrimary, binary.LittleEndian))
	put(mPathPrimary, pathTable(rootPrimary, binary.BigEndian))
	put(lPathJoliet, pathTable(rootJoliet, binary.LittleEndian))
	put(mPathJoliet, pathTable(rootJoliet, binary.BigEndian))

	rootRecP := dirRecord([]byte{0}, rootPrimary, primarySize, true, mtime, nil)
	rootRecJ := dirRecord([]byte{0}, rootJoliet, jolietSize, true, mtime, nil)
	put(pvdSector, volumeDescriptor(1, label, total, lPathPrimary, mPathPrimary, rootRecP, mtime))
	put(svdSector, volumeDescriptor(2, label, total, lPathJoliet, mPathJoliet, rootRecJ, mtime))
	term := make([]byte, 7)
	term[0] = 255
	copy(term[1:], "CD001")
	term[6] = 1
	put(termSector, term)
	return img, nil
}

// level1Name maps a name to a unique ISO 9660 level 1 identifier: up to 8
// d-characters, a dot, up to 3, and the version ";1".
func level1Name(name string, used map[string]bool) string {
	base, ext := name, ""
	if i := strings.LastIndex(name, "."); i > 0 {
		base, ext = name[:i], name[i+1:]
	}
	d := func(s string, n int) string {
		var b strings.Builder
		for _, r := range strings.ToUpper(s) {
			if b.Len() == n {
				break
			}
			if r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' {
				b.WriteRune(r)
			} else {
				b.WriteByte('_')
			}
		}
		return b.String()
	}
	base, ext = d(base, 8), d(ext, 3)
	if base == "" {
		base = "_"
	}
	id := base + "." + ext + ";1"
	for n := 1; used[id]; n++ {
		suffix := fmt.Sprintf("%d", n)
		b := base
		if len(b)+len(suffix) > 8 {
			b = b[:8-len(suffix)]
		}
		id = b + suffix + "." + ext + ";1"
	}
	used[id] = true
	return id
}

func ucs2(s string) []byte {
	u := utf16.Encode([]rune(s))
	b := make([]byte, 2*len(u))
	for i, c := range u {
		binary.BigEndian.PutUint16(b[2*i:], c)
	}
	return b
}

// both writes v in both byte orders (ECMA-119 §7.3.3 and §7.2.3).
func both32(b []byte, v uint32) {
	binary.LittleEndian.PutUint32(b, v)
	binary.BigEndian.PutUint32(b[4:], v)
}

func both16(b []byte, v uint16) {
	binary.LittleEndian.PutUint16(b, v)
	binary.BigEndian.PutUint16(b[2:], v)
}

// dirRecord is a directory record (ECMA-119 §9.1).
func dirRecord(id []byte, extent, size uint32, dir bool, t time.Time, systemUse []byte) []byte {
	n := 33 + len(id)
	if len(id)%2 == 0 {
		n++ // padding field
	}
	n += len(systemUse)
	if n%2 == 1 {
		n++
	}
	r := make([]byte, n)
	r[0] = byte(n)
	both32(r[2:], extent)
	both32(r[10:], size)
	r[18] = byte(t.Year() - 1900)
	r[19] = byte(t.Month())
	r[20] = byte(t.Day())
	r[21] = byte(t.Hour())
	r[22] = byte(t.Minute())
	r[23] = byte(t.Second())
	r[24] = 0 // GMT offset
	if dir {
		r[25] = 2
	}
	both16(r[28:], 1) // volume sequence number
	r[32] = byte(len(id))
	copy(r[33:], id)
	su := 33 + len(id)
	if len(id)%2 == 0 {
		su++
	}
	copy(r[su:], systemUse)
	return r
}

// rootSystemUse is the System Use field of the root's "." record: the SUSP
// indicator, the Rock Ridge extension reference (which makes Linux prefer
// Rock Ridge to Joliet) and the root's mode.
func rootSystemUse() []byte {
	sp := []byte{'S', 'P', 7, 1, 0xBE, 0xEF, 0}
	id, des, src := "RRIP_1991A", "ROCK RIDGE INTERCHANGE PROTOCOL", "GPUVM"
	er := []byte{'E', 'R', byte(8 + len(id) + len(des) + len(src)), 1, byte(len(id)), byte(len(des)), byte(len(src)), 1}
	er = append(er, id...)
	er = append(er, des...)
	er = append(er, src...)
	out := append(sp, er...)
	return append(out, rrEntries(0o040555, "")...)
}

// rrEntries are the Rock Ridge PX (mode) and, for a named file, NM entries.
func rrEntries(mode uint32, name string) []byte {
	px := make([]byte, 36)
	copy(px, "PX")
	px[2], px[3] = 36, 1
	both32(px[4:], mode)
	nlink := uint32(1)
	if mode&0o040000 != 0 {
		nlink = 2
	}
	both32(px[12:], nlink)
	// uid and gid 0
	if name == "" {
		return px
	}
	nm := []byte{'N', 'M', byte(5 + len(name)), 1, 0}
	return append(px, append(nm, name...)...)
}

// dirSize is the size of a directory's extent: records may not cross a
// sector boundary (ECMA-119 §6.8.1.1).
func dirSize(recs [][]byte) uint32 {
	return uint32(len(packDir(recs)))
}

func packDir(recs [][]byte) []byte {
	var out []byte
	used := 0
	for _, r := range recs {
		if used+len(r) > sector {
			out = append(out, make([]byte, sector-used)...)
			used = 0
		}
		out = append(out, r...)
		used += len(r)
	}
	if used > 0 {
		out = append(out, make([]byte, sector-used)...)
	}
	return out
}

// pathTable holds the root directory only (ECMA-119 §9.4).
func pathTable(rootExtent uint32, order binary.ByteOrder) []byte {
	t := make([]byte, 10)
	t[0] = 1 // length of directory identifier
	order.PutUint32(t[2:], rootExtent)
	order.PutUint16(t[6:], 1) // parent: itself
	return t
}

const pathTableSize = 10

// volumeDescriptor writes the primary (kind 1) or Joliet supplementary
// (kind 2) volume descriptor (ECMA-119 §8.4, §8.5).
func volumeDescriptor(kind byte, label string, total, lPath, mPath uint32, rootRec []byte, t time.Time) []byte {
	v := make([]byte, sector)
	v[0] = kind
	copy(v[1:], "CD001")
	v[6] = 1
	text := func(off, n int, s string) {
		if kind == 2 {
			b := ucs2(s)
			for i := 0; i+1 < n; i += 2 {
				if i < len(b) {
					v[off+i], v[off+i+1] = b[i], b[i+1]
				} else {
					v[off+i], v[off+i+1] = 0, ' '
				}
			}
			if n%2 == 1 {
				v[off+n-1] = 0
			}
			return
		}
		for i := 0; i < n; i++ {
			if i < len(s) {
				v[off+i] = s[i]
			} else {
				v[off+i] = ' '
			}
		}
	}
	text(8, 32, "LINUX")
	text(40, 32, label)
	both32(v[80:], total)
	if kind == 2 {
		copy(v[88:], "%/E") // Joliet, UCS-2 level 3
	}
	both16(v[120:], 1)
	both16(v[124:], 1)
	both16(v[128:], sector)
	both32(v[132:], pathTableSize)
	binary.LittleEndian.PutUint32(v[140:], lPath)
	binary.BigEndian.PutUint32(v[148:], mPath)
	copy(v[156:], rootRec[:34])
	text(190, 128, "")
	text(318, 128, "")
	text(446, 128, "GPUVM")
	text(574, 128, "GPUVM CLOUD-INIT SEED")
	text(702, 37, "")
	text(739, 37, "")
	text(776, 37, "")
	stamp := []byte(t.Format("20060102150405") + "00")
	copy(v[813:], stamp)
	copy(v[830:], stamp)
	copy(v[847:], "0000000000000000")
	copy(v[864:], stamp)
	v[881] = 1 // file structure version
	return v
}
