package server

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/windows"
)

// Every value of a Windows install that pkg/windows refuses is refused on
// the request's field for it, exactly; characters an XML answer file
// cannot carry are refused in every value it carries.
func TestWindowsInstallRefusalsNameTheField(t *testing.T) {
	e := newAdminEnv(t)
	e.s.Windows = &WindowsInstalls{Host: noWindowsHost{}, Pool: "gpuvm"}
	dir := t.TempDir()
	file := func(name, data string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	iso, virtio, pw := file("win.iso", "iso"), file("virtio-win.iso", "iso"), file("pw", "Good-pw1\n")
	setup, badExe, msiAsExe := file("setup.exe", "exe"), file("driver'.exe", "exe"), file("cloudbase.exe", "exe")
	body := func(edit func(*api.WindowsInstallRequest)) string {
		r := api.WindowsInstallRequest{Name: "win", ISO: iso, VirtIOWin: virtio, PasswordFile: pw}
		if edit != nil {
			edit(&r)
		}
		return mustJSON(t, r)
	}
	// Past validation, the host makes nothing: the base is valid.
	if code, got := e.call(t, "POST", "/v1/admin/images/windows-install", e.admin, body(nil), nil); code != 500 {
		t.Fatalf("the valid request: %d %v", code, got)
	}
	// Characters XML cannot carry, and noncharacters.
	unsafe := []string{"\x01", "\x1f", "\x00", "\uFFFE", "\uFFFF", "\uFDD0", "\uFDEF", "\U0001FFFE", "\U0010FFFF"}
	type badCase struct {
		name  string
		edit  func(*api.WindowsInstallRequest)
		field string
	}
	var cases []badCase
	str := func(field string, set func(*api.WindowsInstallRequest, string), good string, bad ...string) {
		for _, u := range unsafe {
			bad = append(bad, good[:1]+u+good[1:])
		}
		for _, v := range bad {
			cases = append(cases, badCase{fmt.Sprintf("%s %+q", field, v), func(r *api.WindowsInstallRequest) { set(r, v) }, field})
		}
	}
	str("edition", func(r *api.WindowsInstallRequest, v string) { r.Edition = v }, "windows11", "windows95", "Windows11")
	str("user", func(r *api.WindowsInstallRequest, v string) { r.User = v }, "gpuvm", "administrator", "a@b", "a/b", strings.Repeat("u", 21), "...")
	str("computer_name", func(r *api.WindowsInstallRequest, v string) { r.ComputerName = v }, "win", "12345", "-win", "a-very-long-computer", "wïn")
	str("locale", func(r *api.WindowsInstallRequest, v string) { r.Locale = v }, "en-US", "English", "en_US")
	str("input_locale", func(r *api.WindowsInstallRequest, v string) { r.InputLocale = v }, "de-DE", "0407", "de_DE")
	str("timezone", func(r *api.WindowsInstallRequest, v string) { r.TimeZone = v }, "UTC", "Europe/Berlin", "UTC\x7f")
	str("image_name", func(r *api.WindowsInstallRequest, v string) { r.ImageName = v }, "Windows 11 Pro", strings.Repeat("n", 129), "Pro\u0085")
	cases = append(cases,
		badCase{"image_name and index", func(r *api.WindowsInstallRequest) { r.ImageName, r.ImageIndex = "Pro", 2 }, "image_name"},
		badCase{"image_index", func(r *api.WindowsInstallRequest) { r.ImageIndex = -1 }, "image_index"},
		badCase{"cloudbase_init not an MSI", func(r *api.WindowsInstallRequest) { r.CloudbaseInit = msiAsExe }, "cloudbase_init"},
		badCase{"nvidia_driver quoted", func(r *api.WindowsInstallRequest) { r.NVIDIADriver = badExe }, "nvidia_driver"},
		badCase{"nvidia_args empty", func(r *api.WindowsInstallRequest) { r.NVIDIADriver, r.NVIDIAArgs = setup, []string{""} }, "nvidia_args"},
		badCase{"nvidia_args control", func(r *api.WindowsInstallRequest) { r.NVIDIADriver, r.NVIDIAArgs = setup, []string{"-s\x01"} }, "nvidia_args"},
	)
	// The secrets come from files, which may hold invalid UTF-8 too.
	secrets := []string{"pw\xff", "p\xed\xa0\x80w", " pw", strings.Repeat("p", 128), "pw\x7f", "pw\u0085", "pw\uFFFD"}
	for _, u := range unsafe {
		secrets = append(secrets, "p"+u+"w")
	}
	for i, v := range secrets {
		p := file(fmt.Sprintf("pw-%d", i), v)
		cases = append(cases, badCase{fmt.Sprintf("password_file %+q", v), func(r *api.WindowsInstallRequest) { r.PasswordFile = p }, "password_file"})
	}
	for i, v := range []string{"ABCDE-12345", "abcde-abcde-abcde-abcde-abcde", "ABCDE-ABCDE-ABCDE-ABCDE-ABCD\uFFFF", "ABCDE-ABCDE-ABCDE-ABCDE-ABCD\xff"} {
		p := file(fmt.Sprintf("key-%d", i), v)
		cases = append(cases, badCase{fmt.Sprintf("product_key_file %+q", v), func(r *api.WindowsInstallRequest) { r.ProductKeyFile = p }, "product_key_file"})
	}
	for _, tc := range cases {
		code, got := e.call(t, "POST", "/v1/admin/images/windows-install", e.admin, body(tc.edit), nil)
		if code != 422 || got["field"] != tc.field {
			t.Errorf("%s: %d %v, want 422 on field %s", tc.name, code, got, tc.field)
		}
		if d, _ := got["detail"].(string); strings.Contains(d, "pw") && strings.HasPrefix(tc.name, "password") {
			t.Errorf("%s: the detail quotes the password: %q", tc.name, d)
		}
	}
}

// The route names every field pkg/windows may refuse.
func TestWindowsFieldsAllNamed(t *testing.T) {
	var names []string
	rt := reflect.TypeOf(api.WindowsInstallRequest{})
	for i := range rt.NumField() {
		n, _, _ := strings.Cut(rt.Field(i).Tag.Get("json"), ",")
		names = append(names, n)
	}
	for _, f := range windows.Fields {
		n, ok := windowsFields[f]
		if !ok || !slices.Contains(names, n) {
			t.Errorf("windows field %q is request field %q, which api.WindowsInstallRequest lacks", f, n)
		}
	}
}
