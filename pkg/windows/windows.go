// Package windows renders the unattended install of a Windows guest: the
// answer file Windows Setup finds at the root of a removable drive
// (autounattend.xml), the first-logon script it runs, and the small install
// medium (an ISO 9660 image with Joliet names) that carries both, with the
// optional cloudbase-init MSI and NVIDIA guest-driver installer.
//
// The templates are templates/windows/*.tmpl; an admin may override them
// with a directory holding files of the same names. They receive a Config
// (plus the fields of data below) and must write every value through the
// functions xml (XML character data and attributes; it fails on a value XML
// cannot carry rather than change it) and ps (a single-quoted PowerShell
// string).
//
// The admin password is rendered into autounattend.xml only: it is never in
// an error, a log line or the first-logon script, and the script deletes the
// copy Windows Setup caches in C:\Windows\Panther before sysprep.
//
// It is pure Go (no cgo), so the CLI can render offline.
package windows

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"regexp"
	"slices"
	"strings"
	"text/template"
	"time"
	"unicode/utf8"

	"github.com/gpuvm/gpuvm/pkg/hypervisor/cloudinit"
	"github.com/gpuvm/gpuvm/templates"
)

// Files Render writes, in this order.
const (
	AnswerFile = "autounattend.xml"     // found by Windows Setup at a removable drive's root
	ScriptFile = "gpuvm-firstlogon.ps1" // run by the answer file's first logon
	MediaLabel = "GPUVMWIN"             // volume label of the install medium
	// LicensingScript is the licensing script's name in a Windows guest's
	// seed (pkg/orchestrator.WindowsLicensingScript; repeated here so that
	// the CLI need not import the orchestrator).
	LicensingScript = "gpuvm-licensing.ps1"
)

// Edition is the Windows release being installed; it chooses the virtio-win
// driver directories.
type Edition string

// Editions.
const (
	Windows10  Edition = "windows10"
	Windows11  Edition = "windows11"
	Server2022 Edition = "server2022"
)

// Editions lists the editions Validate accepts.
var Editions = []Edition{Windows10, Windows11, Server2022}

// VirtIODir is the edition's directory name in the virtio-win ISO
// (viostor\<dir>\amd64).
func (e Edition) VirtIODir() string {
	switch e {
	case Windows10:
		return "w10"
	case Windows11:
		return "w11"
	case Server2022:
		return "2k22"
	}
	return ""
}

// Label is the edition's human name.
func (e Edition) Label() string {
	switch e {
	case Windows10:
		return "Windows 10"
	case Windows11:
		return "Windows 11"
	case Server2022:
		return "Windows Server 2022"
	}
	return string(e)
}

// Image selects the image of the ISO's install.wim/install.esd: by Index
// (1-based) or by Name ("Windows 11 Pro"), not both. Neither means index 1.
type Image struct {
	Index int
	Name  string
}

// DefaultNVIDIADriverArgs are the NVIDIA installer's silent-install switches
// (-s: silent, -noreboot: leave the restart to sysprep or the admin).
var DefaultNVIDIADriverArgs = []string{"-s", "-noreboot"}

// Config is one unattended install. Zero values take the documented
// defaults; Validate names what is wrong.
type Config struct {
	// Edition is windows10, windows11 or server2022.
	Edition Edition
	// ComputerName is the NetBIOS name: 1–15 of [A-Za-z0-9-], not all
	// digits, not starting or ending with '-'. Default "gpuvm-win".
	ComputerName string
	// AdminUser is the local administrator created in oobeSystem: 1–20
	// characters without "/\[]:;|=,+*?<>@ and not a built-in account.
	// Default "gpuvm".
	AdminUser string
	// AdminPassword is its password (required; read by the caller from a
	// secret file). At most 127 characters, no control characters.
	AdminPassword string
	// Locale is the language/region tag for UI, system and user locale.
	// Default "en-US".
	Locale string
	// InputLocale is the keyboard: a tag ("de-DE") or "0407:00000407".
	// Default: Locale.
	InputLocale string
	// TimeZone is a Windows time zone ID ("UTC", "W. Europe Standard
	// Time"). Default "UTC".
	TimeZone string
	Image    Image
	// ProductKey is optional: XXXXX-XXXXX-XXXXX-XXXXX-XXXXX.
	ProductKey string
	// CloudbaseInitMSI is the file name, on the install medium, of the
	// cloudbase-init MSI; empty skips cloudbase-init.
	CloudbaseInitMSI string
	// WinFspMSI is the file name, on the install medium, of WinFsp's MSI,
	// which virtio-win's virtiofs needs: with it the image mounts the
	// owner's home on HomeDrive in every VM of a profile with a home
	// (mounts.go); empty: no home in its VMs.
	WinFspMSI string
	// NVIDIADriver is the file name, on the install medium, of the NVIDIA
	// guest-driver installer (setup.exe or the self-extracting .exe);
	// empty skips it. NVIDIADriverArgs default to DefaultNVIDIADriverArgs.
	NVIDIADriver     string
	NVIDIADriverArgs []string
	// Sysprep ends the first logon with sysprep /generalize /oobe
	// /shutdown (building an image); the VM is then shut off.
	Sysprep bool
}

var (
	localeRe     = regexp.MustCompile(`^[a-z]{2,3}(-[A-Za-z0-9]{2,8}){0,3}$`)
	inputHexRe   = regexp.MustCompile(`^[0-9A-Fa-f]{4}:[0-9A-Fa-f]{8}$`)
	computerRe   = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9-]{0,13}[A-Za-z0-9])?$`)
	allDigitsRe  = regexp.MustCompile(`^[0-9]+$`)
	productKeyRe = regexp.MustCompile(`^[A-Z0-9]{5}(-[A-Z0-9]{5}){4}$`)
	timeZoneRe   = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9 .()+-]{0,63}$`)
)

// builtinAccounts cannot be created by the answer file's LocalAccount.
var builtinAccounts = []string{"Administrator", "Guest", "DefaultAccount", "WDAGUtilityAccount", "SYSTEM"}

// WithDefaults returns c with its defaults filled in.
func (c Config) WithDefaults() Config {
	if c.ComputerName == "" {
		c.ComputerName = "gpuvm-win"
	}
	if c.AdminUser == "" {
		c.AdminUser = "gpuvm"
	}
	if c.Locale == "" {
		c.Locale = "en-US"
	}
	if c.InputLocale == "" {
		c.InputLocale = c.Locale
	}
	if c.TimeZone == "" {
		c.TimeZone = "UTC"
	}
	if c.Image.Index == 0 && c.Image.Name == "" {
		c.Image.Index = 1
	}
	if c.NVIDIADriver != "" && len(c.NVIDIADriverArgs) == 0 {
		c.NVIDIADriverArgs = DefaultNVIDIADriverArgs
	}
	return c
}

// Field names a Config value in a refusal (FieldError). Each front end
// (the API's request, the CLI's flags) names the value its own way; Fields
// lists every one, so that a front end can check it names them all.
type Field string

// The fields of a Config that Validate refuses.
const (
	FieldEdition          Field = "edition"
	FieldComputerName     Field = "computer name"
	FieldAdminUser        Field = "admin user"
	FieldAdminPassword    Field = "admin password"
	FieldLocale           Field = "locale"
	FieldInputLocale      Field = "input locale"
	FieldTimeZone         Field = "time zone"
	FieldImageIndex       Field = "image index"
	FieldImageName        Field = "image name"
	FieldProductKey       Field = "product key"
	FieldCloudbaseInitMSI Field = "cloudbase-init MSI"
	FieldWinFspMSI        Field = "WinFsp MSI"
	FieldNVIDIADriver     Field = "NVIDIA driver"
	FieldNVIDIADriverArgs Field = "NVIDIA driver arguments"
)

// Fields are every Field.
var Fields = []Field{FieldEdition, FieldComputerName, FieldAdminUser, FieldAdminPassword, FieldLocale, FieldInputLocale,
	FieldTimeZone, FieldImageIndex, FieldImageName, FieldProductKey, FieldCloudbaseInitMSI, FieldWinFspMSI, FieldNVIDIADriver, FieldNVIDIADriverArgs}

// FieldError is one refused value of a Config; its message never quotes
// the password.
type FieldError struct {
	Field Field
	Msg   string
}

func (e *FieldError) Error() string { return string(e.Field) + ": " + e.Msg }

// ValidationError is every refused value of a Config, in Config's order
// (at least one).
type ValidationError struct {
	Problems []*FieldError
}

func (e *ValidationError) Error() string {
	s := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		s[i] = p.Error()
	}
	return "windows install: " + strings.Join(s, "; ")
}

// Validate checks c (after WithDefaults) and names every problem
// (*ValidationError); it never quotes the password. Every value written
// into the answer file is first checked by xmlText: XML cannot carry some
// characters, and Windows would get another value than the one given.
func (c Config) Validate() error {
	c = c.WithDefaults()
	var errs []*FieldError
	add := func(field Field, format string, args ...any) {
		errs = append(errs, &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)})
	}
	// inXML reports whether v can be written into the answer file, and
	// refuses it if not.
	inXML := func(field Field, v string) bool {
		if err := xmlText(v); err != nil {
			add(field, "%v", err)
			return false
		}
		return true
	}
	switch {
	case c.Edition == "":
		add(FieldEdition, "missing (one of %s)", editionList())
	case !slices.Contains(Editions, c.Edition):
		add(FieldEdition, "%q is none of %s", c.Edition, editionList())
	}
	if inXML(FieldComputerName, c.ComputerName) && (!computerRe.MatchString(c.ComputerName) || allDigitsRe.MatchString(c.ComputerName)) {
		add(FieldComputerName, "%q: want 1 to 15 of A-Z, a-z, 0-9 and '-', not all digits, not starting or ending with '-'", c.ComputerName)
	}
	if inXML(FieldAdminUser, c.AdminUser) {
		if err := userName(c.AdminUser); err != nil {
			add(FieldAdminUser, "%q: %v", c.AdminUser, err)
		}
	}
	switch {
	case c.AdminPassword == "":
		add(FieldAdminPassword, "missing")
	case !inXML(FieldAdminPassword, c.AdminPassword):
	case len([]rune(c.AdminPassword)) > 127:
		add(FieldAdminPassword, "longer than 127 characters")
	case hasControl(c.AdminPassword):
		add(FieldAdminPassword, "holds a control character or invalid UTF-8")
	case strings.TrimSpace(c.AdminPassword) != c.AdminPassword:
		// A secret file's trailing newline is the usual cause.
		add(FieldAdminPassword, "begins or ends with white space")
	}
	if inXML(FieldLocale, c.Locale) && !localeRe.MatchString(c.Locale) {
		add(FieldLocale, "%q is not a language tag such as en-US", c.Locale)
	}
	if inXML(FieldInputLocale, c.InputLocale) && !localeRe.MatchString(c.InputLocale) && !inputHexRe.MatchString(c.InputLocale) {
		add(FieldInputLocale, "%q is neither a language tag (de-DE) nor a keyboard ID (0407:00000407)", c.InputLocale)
	}
	if inXML(FieldTimeZone, c.TimeZone) && !timeZoneRe.MatchString(c.TimeZone) {
		add(FieldTimeZone, "%q is not a Windows time zone ID such as \"UTC\" or \"W. Europe Standard Time\"", c.TimeZone)
	}
	switch {
	case c.Image.Index != 0 && c.Image.Name != "":
		add(FieldImageName, "give an index or a name, not both")
	case c.Image.Index < 0:
		add(FieldImageIndex, "index %d: want 1 or more", c.Image.Index)
	case !inXML(FieldImageName, c.Image.Name):
	case c.Image.Name != "" && (hasControl(c.Image.Name) || len(c.Image.Name) > 128):
		add(FieldImageName, "name %q: want 1 to 128 printable characters", c.Image.Name)
	}
	if c.ProductKey != "" && inXML(FieldProductKey, c.ProductKey) && !productKeyRe.MatchString(c.ProductKey) {
		add(FieldProductKey, "want five groups of five of A-Z and 0-9, such as XXXXX-XXXXX-XXXXX-XXXXX-XXXXX")
	}
	if c.CloudbaseInitMSI != "" {
		if err := mediaName(c.CloudbaseInitMSI, ".msi"); err != nil {
			add(FieldCloudbaseInitMSI, "%q: %v", c.CloudbaseInitMSI, err)
		}
	}
	if c.WinFspMSI != "" {
		if err := mediaName(c.WinFspMSI, ".msi"); err != nil {
			add(FieldWinFspMSI, "%q: %v", c.WinFspMSI, err)
		} else if strings.EqualFold(c.WinFspMSI, c.CloudbaseInitMSI) {
			add(FieldWinFspMSI, "%q is the cloudbase-init MSI's name too", c.WinFspMSI)
		}
	}
	if c.NVIDIADriver != "" {
		if err := mediaName(c.NVIDIADriver, ".exe"); err != nil {
			add(FieldNVIDIADriver, "%q: %v", c.NVIDIADriver, err)
		}
	}
	for i, a := range c.NVIDIADriverArgs {
		if a == "" || hasControl(a) || len(a) > 256 {
			add(FieldNVIDIADriverArgs, "argument %d %q: want 1 to 256 printable characters", i+1, a)
		}
	}
	if len(c.NVIDIADriverArgs) > 0 && c.NVIDIADriver == "" {
		add(FieldNVIDIADriverArgs, "given without an NVIDIA driver")
	}
	if len(errs) > 0 {
		return &ValidationError{Problems: errs}
	}
	return nil
}

// xmlText says why s cannot be written into the answer file as it is:
// invalid UTF-8, a character XML 1.0 cannot carry (a C0 control other than
// tab, LF and CR; U+FFFE, U+FFFF), or a Unicode noncharacter (U+FDD0 to
// U+FDEF, U+nFFFE, U+nFFFF). encoding/xml would write U+FFFD for some of
// them, and Windows Setup would get another value than the admin's. It
// names the character and where it is, never the value.
func xmlText(s string) error {
	pos := 0
	for i, r := range s {
		pos++
		switch {
		case r == utf8.RuneError && !strings.HasPrefix(s[i:], "\uFFFD"):
			return fmt.Errorf("character %d is invalid UTF-8 (byte 0x%02x)", pos, s[i])
		case r < 0x20 && r != '\t' && r != '\n' && r != '\r',
			r >= 0xFDD0 && r <= 0xFDEF,
			r&0xFFFE == 0xFFFE:
			return fmt.Errorf("character %d is U+%04X, which an XML answer file cannot carry", pos, r)
		}
	}
	return nil
}

func editionList() string {
	s := make([]string, len(Editions))
	for i, e := range Editions {
		s[i] = string(e)
	}
	return strings.Join(s, ", ")
}

func userName(u string) error {
	if u == "" || len([]rune(u)) > 20 {
		return errors.New("want 1 to 20 characters")
	}
	if strings.ContainsAny(u, `"/\[]:;|=,+*?<>@`) || hasControl(u) {
		return errors.New(`holds one of "/\[]:;|=,+*?<>@ or a control character`)
	}
	if strings.Trim(u, ". ") == "" {
		return errors.New("only dots and spaces")
	}
	for _, b := range builtinAccounts {
		if strings.EqualFold(u, b) {
			return fmt.Errorf("%s is a built-in account", b)
		}
	}
	return nil
}

// mediaName checks a file name for the install medium's root (the ISO
// writer's rules, and no quote that would end a PowerShell string).
func mediaName(n, ext string) error {
	if len(n) > 64 {
		return errors.New("longer than 64 characters")
	}
	for _, r := range n {
		if r < 0x21 || r > 0x7e || strings.ContainsRune(`/\;'"`+"`$", r) {
			return errors.New("want printable ASCII without spaces, quotes, '$', '/', '\\' or ';'")
		}
	}
	if n == ScriptFile || n == AnswerFile || n == LicensingScript || n == TaskRunnerFile || n == MountsScriptFile {
		return fmt.Errorf("%s is gpuvm's own file", n)
	}
	if !strings.HasSuffix(strings.ToLower(n), ext) {
		return fmt.Errorf("want a %s file", ext)
	}
	return nil
}

func hasControl(s string) bool {
	for _, r := range s {
		if r < 0x20 || r == 0x7f || r == 0xfffd || (r >= 0x80 && r < 0xa0) {
			return true
		}
	}
	return !utf8.ValidString(s)
}

// data is what the templates receive: Config and what follows from it.
type data struct {
	Config
	// DriverPaths are the virtio-win driver directories Setup loads in
	// windowsPE, on each drive letter the virtio-win CD-ROM may get.
	DriverPaths []string
	// FirstLogonCommand finds ScriptName on any drive and runs it.
	FirstLogonCommand string
	ScriptName        string
	LicensingScript   string
	// TaskRunner is the task runner's name on the medium (task.go).
	TaskRunner string
	// MountsScript is the mounts script's name on the medium, MountsFile
	// the seed's list, VioFSExe virtiofs.exe on the virtio-win media
	// (mounts.go).
	MountsScript, MountsFile, VioFSExe string
}

// driveLetters are where the CD-ROMs land in windowsPE (X: is WinPE's RAM
// disk; the Windows ISO, virtio-win and the install medium take three of
// these, in an order Windows does not promise).
var driveLetters = []string{"D", "E", "F", "G"}

func newData(c Config) data {
	d := data{Config: c, ScriptName: ScriptFile, LicensingScript: LicensingScript, TaskRunner: TaskRunnerFile,
		MountsScript: MountsScriptFile, MountsFile: MountsFile, VioFSExe: fmt.Sprintf(`viofs\%s\amd64\virtiofs.exe`, c.Edition.VirtIODir())}
	for _, l := range driveLetters {
		for _, drv := range []string{"viostor", "NetKVM"} {
			d.DriverPaths = append(d.DriverPaths, fmt.Sprintf(`%s:\%s\%s\amd64`, l, drv, c.Edition.VirtIODir()))
		}
	}
	d.FirstLogonCommand = `powershell.exe -NoProfile -ExecutionPolicy Bypass -Command "foreach ($d in Get-PSDrive -PSProvider FileSystem) { $f = Join-Path $d.Root '` +
		ScriptFile + `'; if (Test-Path -LiteralPath $f) { & $f; break } }"`
	return d
}

var funcs = template.FuncMap{
	// xml escapes a value for XML character data or a quoted attribute.
	"xml": func(v any) (string, error) {
		s := fmt.Sprint(v)
		if err := xmlText(s); err != nil {
			return "", err // never the value: it may be the password
		}
		var b bytes.Buffer
		if err := xml.EscapeText(&b, []byte(s)); err != nil {
			return "", err
		}
		return b.String(), nil
	},
	// ps quotes a value as a single-quoted PowerShell string: PowerShell
	// takes ' and the typographic single quotes alike as the delimiter, so
	// each is doubled.
	"ps": func(v any) string {
		s := fmt.Sprint(v)
		var b strings.Builder
		b.WriteByte('\'')
		for _, r := range s {
			switch r {
			case '\'', '\u2018', '\u2019', '\u201a', '\u201b':
				b.WriteRune(r)
			}
			b.WriteRune(r)
		}
		b.WriteByte('\'')
		return b.String()
	},
	"add": func(a, b int) int { return a + b },
}

// DefaultTemplates are the built-in templates (templates/windows).
func DefaultTemplates() fs.FS {
	sub, err := fs.Sub(templates.FS, "windows")
	if err != nil {
		panic(err) // the embedded directory is part of the build
	}
	return sub
}

// Render validates c and renders AnswerFile, ScriptFile, TaskRunnerFile
// and, with WinFspMSI, MountsScriptFile from "<name>.tmpl" in tmpls (DefaultTemplates() when nil; a template an
// override directory lacks is taken from the built-in ones). The answer
// file must be well-formed XML with an <unattend> root, or Render fails.
func Render(c Config, tmpls fs.FS) (map[string][]byte, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	c = c.WithDefaults()
	d := newData(c)
	out := map[string][]byte{}
	for _, name := range []string{AnswerFile, ScriptFile} {
		b, err := renderTemplate(tmpls, name, d)
		if err != nil {
			return nil, err
		}
		out[name] = b
	}
	if err := WellFormed(out[AnswerFile]); err != nil {
		return nil, fmt.Errorf("windows template %s.tmpl: %w", AnswerFile, err)
	}
	// The task runner, which the first logon installs (task.go).
	runner, err := TaskRunner(tmpls)
	if err != nil {
		return nil, err
	}
	out[TaskRunnerFile] = runner
	// The mounts script, which the first logon installs beside WinFsp
	// (mounts.go).
	if c.WinFspMSI != "" {
		if out[MountsScriptFile], err = MountsScript(tmpls); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// renderTemplate renders the template "<name>.tmpl" of tmpls with data:
// from DefaultTemplates() when tmpls is nil or, an override directory,
// lacks it.
func renderTemplate(tmpls fs.FS, name string, data any) ([]byte, error) {
	def := DefaultTemplates()
	if tmpls == nil {
		tmpls = def
	}
	src, err := fs.ReadFile(tmpls, name+".tmpl")
	if errors.Is(err, fs.ErrNotExist) && tmpls != def {
		src, err = fs.ReadFile(def, name+".tmpl")
	}
	if err != nil {
		return nil, fmt.Errorf("windows template %s.tmpl: %w", name, err)
	}
	t, err := template.New(name).Funcs(funcs).Option("missingkey=error").Parse(string(src))
	if err != nil {
		return nil, fmt.Errorf("windows template %s.tmpl: %w", name, err)
	}
	var b bytes.Buffer
	if err := t.Execute(&b, data); err != nil {
		// text/template's error quotes no value, only the action.
		return nil, fmt.Errorf("windows template %s.tmpl: %w", name, err)
	}
	return b.Bytes(), nil
}

// WellFormed checks that b is one well-formed XML document whose root is
// <unattend> in the unattend namespace.
func WellFormed(b []byte) error {
	dec := xml.NewDecoder(bytes.NewReader(b))
	depth, roots := 0, 0
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("not well-formed XML: %w", err)
		}
		switch t := tok.(type) {
		case xml.StartElement:
			if depth == 0 {
				roots++
				if t.Name.Local != "unattend" || t.Name.Space != UnattendNamespace {
					return fmt.Errorf("root element is {%s}%s, want {%s}unattend", t.Name.Space, t.Name.Local, UnattendNamespace)
				}
			}
			depth++
		case xml.EndElement:
			depth--
		}
	}
	if roots != 1 {
		return fmt.Errorf("want one root element, found %d", roots)
	}
	return nil
}

// UnattendNamespace is the answer file's XML namespace.
const UnattendNamespace = "urn:schemas-microsoft-com:unattend"

// MediaFile is a file for the install medium besides the rendered ones (the
// cloudbase-init MSI, the NVIDIA installer, a licensing script).
type MediaFile = cloudinit.File

// Media renders c and packs the result and extra into the install medium:
// an ISO 9660 image (Joliet names for Windows) labelled MediaLabel. Each of
// c.CloudbaseInitMSI and c.NVIDIADriver must be among extra.
func Media(c Config, tmpls fs.FS, extra []MediaFile, mtime time.Time) ([]byte, error) {
	files, err := Render(c, tmpls)
	if err != nil {
		return nil, err
	}
	have := map[string]bool{}
	for _, f := range extra {
		have[f.Name] = true
	}
	for _, need := range []string{c.CloudbaseInitMSI, c.WinFspMSI, c.NVIDIADriver} {
		if need != "" && !have[need] {
			return nil, fmt.Errorf("windows install medium: %s is named in the configuration but not given", need)
		}
	}
	fl := []cloudinit.File{{Name: AnswerFile, Data: files[AnswerFile]}, {Name: ScriptFile, Data: files[ScriptFile]},
		{Name: TaskRunnerFile, Data: files[TaskRunnerFile]}}
	if b, ok := files[MountsScriptFile]; ok {
		fl = append(fl, cloudinit.File{Name: MountsScriptFile, Data: b})
	}
	fl = append(fl, extra...)
	iso, err := cloudinit.ISO(MediaLabel, fl, mtime)
	if err != nil {
		return nil, fmt.Errorf("windows install medium: %w", err)
	}
	return iso, nil
}
