// Command crosscheck type-checks Go packages, and every package they import
// (the standard library's too), from source as the compiler would see them
// on other platforms: `crosscheck -goos windows,darwin ./cmd/gpuvm` fails,
// naming the file and line, where the CLI would not build for Windows or
// macOS (a symbol of one platform only, a file its build tags leave out).
// It compiles nothing: on a fresh machine the two cross builds it stands in
// for compiled the standard library and the CLI's 260 dependencies for two
// more platforms, minutes of `make lint`.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"golang.org/x/tools/go/packages"
)

func main() {
	goos := flag.String("goos", "windows,darwin", "the platforms (GOOS values, comma-separated) to check for")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: crosscheck [-goos windows,darwin] PACKAGE...")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	failed := false
	for _, g := range strings.Split(*goos, ",") {
		n, errs, err := check(strings.TrimSpace(g), flag.Args())
		switch {
		case err != nil:
			fmt.Fprintf(os.Stderr, "crosscheck: GOOS=%s: %v\n", g, err)
			failed = true
		case len(errs) > 0:
			for _, e := range errs {
				fmt.Fprintf(os.Stderr, "crosscheck: GOOS=%s: %s\n", g, e)
			}
			failed = true
		default:
			fmt.Printf("crosscheck: GOOS=%s: %s and the %d packages they import type-check\n", g, strings.Join(flag.Args(), " "), n)
		}
	}
	if failed {
		os.Exit(1)
	}
}

// check loads patterns and all they import from source for goos (cgo off,
// as the CLI is built) and type-checks them: the number of packages, and
// the errors found in any of them.
func check(goos string, patterns []string) (int, []string, error) {
	if goos == "" {
		return 0, nil, fmt.Errorf("an empty GOOS")
	}
	start := time.Now()
	cfg := &packages.Config{
		Mode: packages.NeedName | packages.NeedFiles | packages.NeedImports | packages.NeedDeps |
			packages.NeedSyntax | packages.NeedTypes,
		Env: append(os.Environ(), "GOOS="+goos, "GOARCH=amd64", "CGO_ENABLED=0"),
	}
	pkgs, err := packages.Load(cfg, patterns...)
	if err != nil {
		return 0, nil, fmt.Errorf("load %s: %w", strings.Join(patterns, " "), err)
	}
	var errs []string
	n := 0
	packages.Visit(pkgs, nil, func(p *packages.Package) {
		n++
		for _, e := range p.Errors {
			errs = append(errs, fmt.Sprintf("%s: %s", p.PkgPath, e))
		}
	})
	if len(errs) == 0 && n == 0 {
		return 0, nil, fmt.Errorf("%s matched no package", strings.Join(patterns, " "))
	}
	if os.Getenv("CROSSCHECK_VERBOSE") != "" {
		fmt.Fprintf(os.Stderr, "crosscheck: GOOS=%s: %d packages in %v\n", goos, n, time.Since(start).Round(time.Millisecond))
	}
	return n - len(pkgs), errs, nil
}
