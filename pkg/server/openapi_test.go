package server

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite golden files")

var ginParam = regexp.MustCompile(`[:*]([A-Za-z_]+)`)

// Every route gin serves is in the document, and every route of the
// document is served.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	s := testServer(t, nil)
	var served, documented []string
	for _, r := range s.engine.Routes() {
		served = append(served, r.Method+" "+ginParam.ReplaceAllString(r.Path, "{$1}"))
	}
	for _, r := range apiRoutes {
		documented = append(documented, r.Method+" "+r.Path)
	}
	slices.Sort(served)
	slices.Sort(documented)
	for _, r := range served {
		if !slices.Contains(documented, r) {
			t.Errorf("route %s is served but not in the OpenAPI document (apiRoutes in openapi.go)", r)
		}
	}
	for _, r := range documented {
		if !slices.Contains(served, r) {
			t.Errorf("route %s is in the OpenAPI document but not served", r)
		}
	}
	if dup := slices.Compact(slices.Clone(documented)); len(dup) != len(documented) {
		t.Errorf("a route is documented twice: %v", documented)
	}
}

// The document is valid JSON with the parts a client generator needs, every
// $ref resolves, and docs/openapi.json holds it (go test -update rewrites it).
func TestOpenAPIDocument(t *testing.T) {
	s := testServer(t, nil)
	rec, _ := do(t, s, "GET", "/openapi.json", "")
	if rec.Code != 200 || rec.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("%d %s", rec.Code, rec.Header())
	}
	var doc map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if doc["openapi"] != "3.1.0" {
		t.Errorf("openapi %v", doc["openapi"])
	}
	schemas := doc["components"].(map[string]any)["schemas"].(map[string]any)
	for _, ref := range regexp.MustCompile(`"\$ref": "#/components/schemas/([A-Za-z]+)"`).FindAllStringSubmatch(rec.Body.String(), -1) {
		if schemas[ref[1]] == nil {
			t.Errorf("$ref to missing schema %s", ref[1])
		}
	}
	vm := schemas["VM"].(map[string]any)["properties"].(map[string]any)
	if vm["lease_end"] == nil || vm["gpus"].(map[string]any)["items"].(map[string]any)["$ref"] != "#/components/schemas/VMGPU" {
		t.Errorf("VM schema %v", vm)
	}
	ids := map[string]bool{}
	for path, item := range doc["paths"].(map[string]any) {
		for method, op := range item.(map[string]any) {
			id := op.(map[string]any)["operationId"].(string)
			if ids[id] {
				t.Errorf("operationId %s of %s %s is not unique", id, method, path)
			}
			ids[id] = true
			if !strings.HasPrefix(path, "/") {
				t.Errorf("path %s", path)
			}
		}
	}
	const golden = "../../docs/openapi.json"
	if *update {
		if err := os.WriteFile(golden, rec.Body.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test ./pkg/server -run OpenAPI -update)", err)
	}
	if !bytes.Equal(want, rec.Body.Bytes()) {
		t.Errorf("%s is not the document served; run go test ./pkg/server -run OpenAPIDocument -update", golden)
	}
}
