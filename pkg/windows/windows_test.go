package windows

import (
	"bytes"
	"encoding/xml"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"
	"time"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// A password with every character XML escapes, and a PowerShell quote.
const nastyPassword = `p<a>ss&w"o'rd ü`

func goldenConfigs() map[string]Config {
	return map[string]Config{
		"windows11-image-build": {
			Edition: Windows11, ComputerName: "win11-build", AdminUser: "admin",
			AdminPassword: nastyPassword, Locale: "de-DE", InputLocale: "0407:00000407",
			TimeZone: "W. Europe Standard Time", Image: Image{Index: 6},
			CloudbaseInitMSI: "CloudbaseInitSetup_x64.msi",
			WinFspMSI:        "winfsp-2.0.23075.msi",
			NVIDIADriver:     "552.74_grid_win10_win11_server2022_dch_64bit_international.exe",
			Sysprep:          true,
		},
		"server2022-by-name": {
			Edition: Server2022, ComputerName: "srv22", AdminPassword: "S3rver!2022",
			Image:        Image{Name: "Windows Server 2022 SERVERDATACENTER"},
			ProductKey:   "WX4NM-KYWYW-QJJR4-XV3QB-6VM33",
			NVIDIADriver: "setup.exe", NVIDIADriverArgs: []string{"-s", "-noreboot", "-clean"},
		},
		"windows10-defaults": {Edition: Windows10, AdminPassword: "pw"},
	}
}

func TestGolden(t *testing.T) {
	for name, c := range goldenConfigs() {
		t.Run(name, func(t *testing.T) {
			files, err := Render(c, nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range []string{AnswerFile, ScriptFile} {
				path := filepath.Join("testdata", name+"."+f+".golden")
				if *update {
					if err := os.MkdirAll("testdata", 0o755); err != nil {
						t.Fatal(err)
					}
					if err := os.WriteFile(path, files[f], 0o644); err != nil {
						t.Fatal(err)
					}
				}
				want, err := os.ReadFile(path)
				if err != nil {
					t.Fatalf("%v (go test -update writes it)", err)
				}
				if !bytes.Equal(want, files[f]) {
					t.Errorf("%s differs from the rendered %s (go test -update rewrites it):\n%s", path, f, files[f])
				}
			}
		})
	}
}

// The answer file, as far as the tests read it.
type unattend struct {
	XMLName  xml.Name  `xml:"urn:schemas-microsoft-com:unattend unattend"`
	Settings []setting `xml:"settings"`
}

type setting struct {
	Pass       string      `xml:"pass,attr"`
	Components []component `xml:"component"`
}

type component struct {
	Name         string `xml:"name,attr"`
	Arch         string `xml:"processorArchitecture,attr"`
	Token        string `xml:"publicKeyToken,attr"`
	ComputerName string `xml:"ComputerName"`
	TimeZone     string `xml:"TimeZone"`
	InputLocale  string `xml:"InputLocale"`
	UILanguage   string `xml:"UILanguage"`
	DriverPaths  []struct {
		Key  string `xml:"http://schemas.microsoft.com/WMIConfig/2002/State keyValue,attr"`
		Path string `xml:"Path"`
	} `xml:"DriverPaths>PathAndCredentials"`
	Partitions []struct {
		Type string `xml:"Type"`
	} `xml:"DiskConfiguration>Disk>CreatePartitions>CreatePartition"`
	ImageKey   string `xml:"ImageInstall>OSImage>InstallFrom>MetaData>Key"`
	ImageValue string `xml:"ImageInstall>OSImage>InstallFrom>MetaData>Value"`
	ProductKey string `xml:"UserData>ProductKey>Key"`
	AcceptEula string `xml:"UserData>AcceptEula"`
	DenyTS     string `xml:"fDenyTSConnections"`
	NLA        string `xml:"UserAuthentication"`
	Firewall   []struct {
		Active, Group, Profile string
	} `xml:"FirewallGroups>FirewallGroup"`
	Accounts []struct {
		Name     string `xml:"Name"`
		Group    string `xml:"Group"`
		Password string `xml:"Password>Value"`
	} `xml:"UserAccounts>LocalAccounts>LocalAccount"`
	AutoLogonUser     string `xml:"AutoLogon>Username"`
	AutoLogonPassword string `xml:"AutoLogon>Password>Value"`
	AutoLogonCount    string `xml:"AutoLogon>LogonCount"`
	HideOnline        string `xml:"OOBE>HideOnlineAccountScreens"`
	FirstLogon        []struct {
		Order       string `xml:"Order"`
		CommandLine string `xml:"CommandLine"`
	} `xml:"FirstLogonCommands>SynchronousCommand"`
}

func parse(t *testing.T, b []byte) (unattend, map[string]component) {
	t.Helper()
	var u unattend
	if err := xml.Unmarshal(b, &u); err != nil {
		t.Fatalf("answer file does not parse: %v\n%s", err, b)
	}
	comps := map[string]component{}
	for _, s := range u.Settings {
		for _, c := range s.Components {
			if c.Arch != "amd64" || c.Token != "31bf3856ad364e35" {
				t.Errorf("%s/%s: processorArchitecture %q publicKeyToken %q", s.Pass, c.Name, c.Arch, c.Token)
			}
			comps[s.Pass+"/"+c.Name] = c
		}
	}
	return u, comps
}

func TestAnswerFileStructure(t *testing.T) {
	for name, c := range goldenConfigs() {
		t.Run(name, func(t *testing.T) {
			files, err := Render(c, nil)
			if err != nil {
				t.Fatal(err)
			}
			c = c.WithDefaults()
			u, comps := parse(t, files[AnswerFile])
			var passes []string
			for _, s := range u.Settings {
				passes = append(passes, s.Pass)
			}
			if got := strings.Join(passes, ","); got != "windowsPE,specialize,oobeSystem" {
				t.Errorf("passes = %s", got)
			}
			for _, want := range []string{
				"windowsPE/Microsoft-Windows-International-Core-WinPE",
				"windowsPE/Microsoft-Windows-PnpCustomizations-WinPE",
				"windowsPE/Microsoft-Windows-Setup",
				"specialize/Microsoft-Windows-Shell-Setup",
				"specialize/Microsoft-Windows-TerminalServices-LocalSessionManager",
				"specialize/Microsoft-Windows-TerminalServices-RDP-WinStationExtensions",
				"specialize/Networking-MPSSVC-Svc",
				"oobeSystem/Microsoft-Windows-International-Core",
				"oobeSystem/Microsoft-Windows-Shell-Setup",
			} {
				if _, ok := comps[want]; !ok {
					t.Errorf("component %s missing", want)
				}
			}
			pe := comps["windowsPE/Microsoft-Windows-International-Core-WinPE"]
			if pe.UILanguage != c.Locale || pe.InputLocale != c.InputLocale {
				t.Errorf("windowsPE locale %q/%q, want %q/%q", pe.UILanguage, pe.InputLocale, c.Locale, c.InputLocale)
			}
			drv := comps["windowsPE/Microsoft-Windows-PnpCustomizations-WinPE"].DriverPaths
			if len(drv) != 2*len(driveLetters) {
				t.Errorf("%d driver paths", len(drv))
			}
			for i, p := range drv {
				if !strings.Contains(p.Path, `\`+c.Edition.VirtIODir()+`\amd64`) || p.Key == "" {
					t.Errorf("driver path %d = %+v", i, p)
				}
			}
			if drv[0].Path != `D:\viostor\`+c.Edition.VirtIODir()+`\amd64` {
				t.Errorf("first driver path %q", drv[0].Path)
			}
			setup := comps["windowsPE/Microsoft-Windows-Setup"]
			var types []string
			for _, p := range setup.Partitions {
				types = append(types, p.Type)
			}
			if got := strings.Join(types, ","); got != "EFI,MSR,Primary" {
				t.Errorf("GPT layout = %s", got)
			}
			if c.Image.Name != "" {
				if setup.ImageKey != "/IMAGE/NAME" || setup.ImageValue != c.Image.Name {
					t.Errorf("image %s=%s", setup.ImageKey, setup.ImageValue)
				}
			} else if setup.ImageKey != "/IMAGE/INDEX" || setup.ImageValue != strconv.Itoa(c.Image.Index) {
				t.Errorf("image %s=%s", setup.ImageKey, setup.ImageValue)
			}
			if setup.ProductKey != c.ProductKey || setup.AcceptEula != "true" {
				t.Errorf("product key %q eula %q", setup.ProductKey, setup.AcceptEula)
			}
			sp := comps["specialize/Microsoft-Windows-Shell-Setup"]
			if sp.ComputerName != c.ComputerName || sp.TimeZone != c.TimeZone {
				t.Errorf("specialize %q %q", sp.ComputerName, sp.TimeZone)
			}
			if comps["specialize/Microsoft-Windows-TerminalServices-LocalSessionManager"].DenyTS != "false" {
				t.Error("RDP not enabled")
			}
			if comps["specialize/Microsoft-Windows-TerminalServices-RDP-WinStationExtensions"].NLA != "1" {
				t.Error("NLA not on")
			}
			fw := comps["specialize/Networking-MPSSVC-Svc"].Firewall
			if len(fw) != 1 || fw[0].Active != "true" || fw[0].Group != "@FirewallAPI.dll,-28752" || fw[0].Profile != "all" {
				t.Errorf("firewall = %+v", fw)
			}
			oobe := comps["oobeSystem/Microsoft-Windows-Shell-Setup"]
			if len(oobe.Accounts) != 1 || oobe.Accounts[0].Name != c.AdminUser || oobe.Accounts[0].Group != "Administrators" {
				t.Errorf("accounts = %+v", oobe.Accounts)
			}
			// The password comes back exactly, whatever it holds.
			if oobe.Accounts[0].Password != c.AdminPassword || oobe.AutoLogonPassword != c.AdminPassword {
				t.Errorf("password did not round-trip through XML")
			}
			if oobe.AutoLogonUser != c.AdminUser || oobe.AutoLogonCount != "1" || oobe.HideOnline != "true" {
				t.Errorf("autologon %q %q, hide online %q", oobe.AutoLogonUser, oobe.AutoLogonCount, oobe.HideOnline)
			}
			if len(oobe.FirstLogon) != 1 || oobe.FirstLogon[0].CommandLine != newData(c).FirstLogonCommand {
				t.Errorf("first logon = %+v", oobe.FirstLogon)
			}
			if n := len(oobe.FirstLogon[0].CommandLine); n > 1024 {
				t.Errorf("first-logon command is %d characters; Windows takes 1024", n)
			}

			// The password is in the answer file only.
			if strings.Contains(string(files[ScriptFile]), c.AdminPassword) {
				t.Error("the first-logon script holds the password")
			}
			script := string(files[ScriptFile])
			for _, want := range []string{"virtio-win-guest-tools.exe", "qemu-ga-x86_64.msi", "gpuvm-licensing", `C:\Windows\Panther\unattend.xml`} {
				if !strings.Contains(script, want) {
					t.Errorf("script lacks %q", want)
				}
			}
			if got := strings.Contains(script, "sysprep.exe"); got != c.Sysprep {
				t.Errorf("script runs sysprep = %v, want %v", got, c.Sysprep)
			}
			if got := strings.Contains(script, "cloudbase-init'"); got != (c.CloudbaseInitMSI != "") {
				t.Errorf("script installs cloudbase-init = %v", got)
			}
			// WinFsp, and the mounts script beside it, for homes.
			_, mounts := files[MountsScriptFile]
			if got := strings.Contains(script, "fsreg.bat"); got != (c.WinFspMSI != "") || mounts != got {
				t.Errorf("script registers virtiofs with WinFsp = %v, the mounts script rendered = %v; WinFsp MSI %q", got, mounts, c.WinFspMSI)
			}
			if c.NVIDIADriver != "" {
				want := "Run (Join-Path $media '" + c.NVIDIADriver + "') @("
				for i, a := range c.NVIDIADriverArgs {
					if i > 0 {
						want += ", "
					}
					want += "'" + a + "'"
				}
				if !strings.Contains(script, want+")") {
					t.Errorf("script lacks %q", want)
				}
			} else if strings.Contains(script, "NVIDIA guest driver") {
				t.Error("script installs an NVIDIA driver nobody gave")
			}
		})
	}
}

func TestEscaping(t *testing.T) {
	files, err := Render(Config{Edition: Windows11, AdminPassword: nastyPassword}, nil)
	if err != nil {
		t.Fatal(err)
	}
	a := string(files[AnswerFile])
	if strings.Contains(a, nastyPassword) {
		t.Error("the password is in the answer file unescaped")
	}
	want := "<Value>p&lt;a&gt;ss&amp;w&#34;o&#39;rd ü</Value>"
	if strings.Count(a, want) != 2 {
		t.Errorf("answer file lacks %s twice:\n%s", want, a)
	}
	if !strings.Contains(a, "{ &amp; $f; break }") {
		t.Error("the first-logon command's & is not escaped")
	}
}

func TestPowerShellQuote(t *testing.T) {
	ps := funcs["ps"].(func(any) string)
	for in, want := range map[string]string{
		"setup.exe": "'setup.exe'",
		"it's":      "'it''s'",
		"a\u2019b":  "'a\u2019\u2019b'",
		"$x `y`":    "'$x `y`'",
		"":          "''",
	} {
		if got := ps(in); got != want {
			t.Errorf("ps(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestValidate(t *testing.T) {
	ok := Config{Edition: Windows11, AdminPassword: "pw"}
	for _, tc := range []struct {
		name  string
		edit  func(*Config)
		field string
	}{
		{"no edition", func(c *Config) { c.Edition = "" }, "edition: missing"},
		{"bad edition", func(c *Config) { c.Edition = "windows7" }, `edition: "windows7"`},
		{"long computer name", func(c *Config) { c.ComputerName = "a-very-long-computer" }, "computer name"},
		{"digit computer name", func(c *Config) { c.ComputerName = "12345" }, "computer name"},
		{"dash computer name", func(c *Config) { c.ComputerName = "-win" }, "computer name"},
		{"builtin user", func(c *Config) { c.AdminUser = "administrator" }, "admin user"},
		{"user with @", func(c *Config) { c.AdminUser = "a@b" }, "admin user"},
		{"no password", func(c *Config) { c.AdminPassword = "" }, "admin password: missing"},
		{"password newline", func(c *Config) { c.AdminPassword = "secret-pw\n" }, "admin password"},
		{"password control", func(c *Config) { c.AdminPassword = "secret\x01pw" }, "admin password"},
		{"password long", func(c *Config) { c.AdminPassword = strings.Repeat("x", 128) }, "admin password"},
		{"locale", func(c *Config) { c.Locale = "English" }, "locale"},
		{"input locale", func(c *Config) { c.InputLocale = "0407" }, "input locale"},
		{"time zone", func(c *Config) { c.TimeZone = "Europe/Berlin" }, "time zone"},
		{"index and name", func(c *Config) { c.Image = Image{Index: 2, Name: "Pro"} }, "image"},
		{"negative index", func(c *Config) { c.Image = Image{Index: -1} }, "image"},
		{"product key", func(c *Config) { c.ProductKey = "ABCDE-12345" }, "product key"},
		{"msi name", func(c *Config) { c.CloudbaseInitMSI = "cloudbase init.msi" }, "cloudbase-init MSI"},
		{"msi ext", func(c *Config) { c.CloudbaseInitMSI = "cloudbase.exe" }, "cloudbase-init MSI"},
		{"winfsp ext", func(c *Config) { c.WinFspMSI = "winfsp.exe" }, "WinFsp MSI"},
		{"winfsp own name", func(c *Config) { c.WinFspMSI = MountsScriptFile }, "WinFsp MSI"},
		{"winfsp is cloudbase", func(c *Config) { c.CloudbaseInitMSI, c.WinFspMSI = "x.msi", "X.msi" }, "WinFsp MSI"},
		{"driver quote", func(c *Config) { c.NVIDIADriver = "x'.exe" }, "NVIDIA driver"},
		{"driver own name", func(c *Config) { c.NVIDIADriver = LicensingScript }, "NVIDIA driver"},
		{"args without driver", func(c *Config) { c.NVIDIADriverArgs = []string{"-s"} }, "NVIDIA driver arguments"},
		{"empty arg", func(c *Config) { c.NVIDIADriver = "setup.exe"; c.NVIDIADriverArgs = []string{""} }, "NVIDIA driver arguments"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := ok
			tc.edit(&c)
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("Validate = %v, want an error naming %q", err, tc.field)
			}
			if c.AdminPassword != "" && strings.Contains(err.Error(), strings.TrimSpace(c.AdminPassword)) {
				t.Errorf("the error quotes the password: %v", err)
			}
			if _, err := Render(c, nil); err == nil {
				t.Error("Render accepted what Validate refused")
			}
		})
	}
	if err := ok.Validate(); err != nil {
		t.Fatalf("good config: %v", err)
	}
}

func TestOverrideTemplates(t *testing.T) {
	c := Config{Edition: Windows10, AdminPassword: "pw"}
	// An override of the script only: the answer file comes from the built-in template.
	files, err := Render(c, fstest.MapFS{ScriptFile + ".tmpl": {Data: []byte("Write-Output {{ps .AdminUser}}\n")}})
	if err != nil {
		t.Fatal(err)
	}
	if string(files[ScriptFile]) != "Write-Output 'gpuvm'\n" {
		t.Errorf("override script = %q", files[ScriptFile])
	}
	builtin, _ := Render(c, nil)
	if !bytes.Equal(files[AnswerFile], builtin[AnswerFile]) {
		t.Error("answer file not taken from the built-in template")
	}
	// An override that forgets to escape makes XML that is not well-formed: refused.
	_, err = Render(Config{Edition: Windows10, AdminPassword: "a<b"}, fstest.MapFS{AnswerFile + ".tmpl": {Data: []byte(
		`<unattend xmlns="urn:schemas-microsoft-com:unattend"><x>{{.AdminPassword}}</x></unattend>`)}})
	if err == nil || !strings.Contains(err.Error(), "not well-formed") || strings.Contains(err.Error(), "a<b") {
		t.Errorf("unescaped override: %v", err)
	}
	_, err = Render(c, fstest.MapFS{AnswerFile + ".tmpl": {Data: []byte(`<other/>`)}})
	if err == nil || !strings.Contains(err.Error(), "root element") {
		t.Errorf("wrong root: %v", err)
	}
	_, err = Render(c, fstest.MapFS{AnswerFile + ".tmpl": {Data: []byte(`{{.NoSuchField}}`)}})
	if err == nil || !strings.Contains(err.Error(), AnswerFile+".tmpl") {
		t.Errorf("bad field: %v", err)
	}
}

func TestMedia(t *testing.T) {
	c := goldenConfigs()["windows11-image-build"]
	msi := MediaFile{Name: c.CloudbaseInitMSI, Data: []byte("MSI bytes")}
	winfsp := MediaFile{Name: c.WinFspMSI, Data: []byte("WinFsp MSI bytes")}
	drv := MediaFile{Name: c.NVIDIADriver, Data: []byte("NVIDIA installer bytes")}
	mtime := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	if _, err := Media(c, nil, []MediaFile{msi, winfsp}, mtime); err == nil || !strings.Contains(err.Error(), c.NVIDIADriver) {
		t.Errorf("missing driver: %v", err)
	}
	if _, err := Media(c, nil, []MediaFile{msi, drv}, mtime); err == nil || !strings.Contains(err.Error(), c.WinFspMSI) {
		t.Errorf("missing WinFsp: %v", err)
	}
	iso, err := Media(c, nil, []MediaFile{msi, winfsp, drv}, mtime)
	if err != nil {
		t.Fatal(err)
	}
	files, _ := Render(c, nil)
	for _, want := range [][]byte{files[AnswerFile], files[ScriptFile], files[MountsScriptFile], msi.Data, winfsp.Data, drv.Data, []byte(MediaLabel),
		ucs2(AnswerFile), ucs2(c.NVIDIADriver), ucs2(MountsScriptFile)} {
		if !bytes.Contains(iso, want) {
			t.Errorf("medium lacks %.40q", want)
		}
	}
	again, _ := Media(c, nil, []MediaFile{msi, winfsp, drv}, mtime)
	if !bytes.Equal(iso, again) {
		t.Error("medium is not reproducible")
	}
}

// ucs2 is a Joliet name as it appears on the medium (big-endian UCS-2).
func ucs2(s string) []byte {
	var b []byte
	for _, r := range s {
		b = append(b, byte(r>>8), byte(r))
	}
	return b
}

// TestGoldenXMLLint has libxml2 (a second, independent parser) read every
// golden answer file. Microsoft's unattend schema is not at hand (it ships
// with Windows SIM only), so this checks well-formedness, not validity.
func TestGoldenXMLLint(t *testing.T) {
	bin, err := exec.LookPath("xmllint")
	if err != nil {
		t.Skip("xmllint is missing (Debian: libxml2-utils)")
	}
	for name := range goldenConfigs() {
		path := filepath.Join("testdata", name+"."+AnswerFile+".golden")
		if out, err := exec.Command(bin, "--noout", path).CombinedOutput(); err != nil {
			t.Errorf("xmllint %s: %v\n%s", path, err, out)
		}
	}
}

// Every refusal names its field: one bad value at a time, exactly one
// problem, on that field.
func TestValidateNamesTheField(t *testing.T) {
	ok := Config{Edition: Windows11, AdminPassword: "pw"}
	// Characters an XML answer file cannot carry, and noncharacters.
	unsafe := []string{"\x00", "\x01", "\x1f", "\uFFFE", "\uFFFF", "\uFDD0", "\uFDEF", "\U0001FFFE", "\U0001FFFF", "\U0010FFFE", "\U0010FFFF", "\xff", "\xed\xa0\x80", "\xc3"}
	type tcase struct {
		name  string
		edit  func(*Config)
		field Field
	}
	var cases []tcase
	text := func(field Field, set func(*Config, string), good string, bad ...string) {
		for _, u := range unsafe {
			bad = append(bad, good[:1]+u+good[1:])
		}
		for _, v := range bad {
			cases = append(cases, tcase{fmt.Sprintf("%s %+q", field, v), func(c *Config) { set(c, v) }, field})
		}
	}
	text(FieldComputerName, func(c *Config, v string) { c.ComputerName = v }, "win", "12345", "-win", "wïn")
	text(FieldAdminUser, func(c *Config, v string) { c.AdminUser = v }, "gpuvm", "Guest", "a@b", strings.Repeat("u", 21))
	text(FieldAdminPassword, func(c *Config, v string) { c.AdminPassword = v }, "secret", " secret", strings.Repeat("p", 128), "se\u0085cret", "se\uFFFDcret")
	text(FieldLocale, func(c *Config, v string) { c.Locale, c.InputLocale = v, "en-US" }, "en-US", "English") // the input locale defaults to it
	text(FieldInputLocale, func(c *Config, v string) { c.InputLocale = v }, "de-DE", "0407")
	text(FieldTimeZone, func(c *Config, v string) { c.TimeZone = v }, "UTC", "Europe/Berlin")
	text(FieldImageName, func(c *Config, v string) { c.Image.Name = v }, "Windows 11 Pro", strings.Repeat("n", 129))
	text(FieldProductKey, func(c *Config, v string) { c.ProductKey = v }, "ABCDE-ABCDE-ABCDE-ABCDE-ABCDE", "ABCDE-12345")
	cases = append(cases,
		tcase{"edition", func(c *Config) { c.Edition = "windows7" }, FieldEdition},
		tcase{"image index", func(c *Config) { c.Image.Index = -2 }, FieldImageIndex},
		tcase{"image index and name", func(c *Config) { c.Image = Image{Index: 2, Name: "Pro"} }, FieldImageName},
		tcase{"MSI", func(c *Config) { c.CloudbaseInitMSI = "x.exe" }, FieldCloudbaseInitMSI},
		tcase{"WinFsp", func(c *Config) { c.WinFspMSI = "w f.msi" }, FieldWinFspMSI},
		tcase{"driver", func(c *Config) { c.NVIDIADriver = "x y.exe" }, FieldNVIDIADriver},
		tcase{"driver arguments", func(c *Config) { c.NVIDIADriverArgs = []string{"-s"} }, FieldNVIDIADriverArgs},
	)
	for _, tc := range cases {
		c := ok
		tc.edit(&c)
		var ve *ValidationError
		if err := c.Validate(); !errors.As(err, &ve) || len(ve.Problems) != 1 || ve.Problems[0].Field != tc.field {
			t.Errorf("%s: Validate = %v, want one problem on %q", tc.name, err, tc.field)
			continue
		}
		if _, err := Render(c, nil); err == nil {
			t.Errorf("%s: Render accepted what Validate refused", tc.name)
		}
	}
}

// What XML carries reaches Windows as it was given: the answer file holds
// the password itself, not a replacement character.
func TestAnswerFileCarriesTheValues(t *testing.T) {
	for _, pw := range []string{nastyPassword, "Grüße😀", "\uE000private\uFFFC", "a\u2028b", "ü\U0010FFFD"} {
		files, err := Render(Config{Edition: Windows11, AdminUser: "Jürgen", ComputerName: "win", AdminPassword: pw}, nil)
		if err != nil {
			t.Fatalf("%+q: %v", pw, err)
		}
		var doc struct {
			Values []string `xml:"settings>component>UserAccounts>LocalAccounts>LocalAccount>Password>Value"`
			Names  []string `xml:"settings>component>UserAccounts>LocalAccounts>LocalAccount>Name"`
		}
		if err := xml.Unmarshal(files[AnswerFile], &doc); err != nil {
			t.Fatal(err)
		}
		if len(doc.Values) != 1 || doc.Values[0] != pw || len(doc.Names) != 1 || doc.Names[0] != "Jürgen" {
			t.Errorf("%+q: the answer file says %+q for %+q", pw, doc.Values, doc.Names)
		}
	}
}

// An override template that writes into the answer file a value Validate
// does not check for XML fails to render rather than change it.
func TestXMLFunctionRefusesWhatXMLCannotCarry(t *testing.T) {
	tmpl := fstest.MapFS{AnswerFile + ".tmpl": {Data: []byte(`<unattend xmlns="urn:schemas-microsoft-com:unattend"><x>{{xml (index .NVIDIADriverArgs 0)}}</x></unattend>`)}}
	for _, arg := range []string{"-s\uFFFE", "-s\uFFFF", "-s\uFDD0"} {
		c := Config{Edition: Windows11, AdminPassword: "pw", NVIDIADriver: "setup.exe", NVIDIADriverArgs: []string{arg}}
		if _, err := Render(c, tmpl); err == nil || !strings.Contains(err.Error(), "cannot carry") {
			t.Errorf("%+q: Render = %v, want a refusal", arg, err)
		}
	}
	c := Config{Edition: Windows11, AdminPassword: "pw", NVIDIADriver: "setup.exe", NVIDIADriverArgs: []string{"-s"}}
	if _, err := Render(c, tmpl); err != nil {
		t.Fatal(err)
	}
}
