package api

import (
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

// Every JSON field of the inventory types is described in docs/inventory.md,
// and every field the page describes exists.
func TestInventoryDocumented(t *testing.T) {
	b, err := os.ReadFile("../../docs/inventory.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	sections := map[string]reflect.Type{
		"HostInventory": reflect.TypeOf(HostInventory{}), "GPU": reflect.TypeOf(GPU{}),
		"VGPUType": reflect.TypeOf(VGPUType{}), "MIGProfile": reflect.TypeOf(MIGProfile{}),
		"Device": reflect.TypeOf(Device{}), "Hostdev": reflect.TypeOf(Hostdev{}), "Drain": reflect.TypeOf(Drain{}),
		"HostDriver": reflect.TypeOf(HostDriver{}),
	}
	row := regexp.MustCompile("(?m)^\\| `([a-z_]+)` \\|")
	for name, typ := range sections {
		i := strings.Index(doc, "\n## "+name+"\n")
		if i < 0 {
			t.Errorf("docs/inventory.md has no section %q", name)
			continue
		}
		body := doc[i+4+len(name):]
		if j := strings.Index(body, "\n## "); j >= 0 {
			body = body[:j]
		}
		documented := map[string]bool{}
		for _, m := range row.FindAllStringSubmatch(body, -1) {
			documented[m[1]] = true
		}
		for k := 0; k < typ.NumField(); k++ {
			tag := strings.Split(typ.Field(k).Tag.Get("json"), ",")[0]
			if !documented[tag] {
				t.Errorf("%s.%s (json %q) is not documented in docs/inventory.md", name, typ.Field(k).Name, tag)
			}
			delete(documented, tag)
		}
		for f := range documented {
			t.Errorf("docs/inventory.md describes %s.%s, which does not exist", name, f)
		}
	}
}
