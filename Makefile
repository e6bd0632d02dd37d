# gpuvm — build, test and run. `make run` and `make test` work on a fresh
# Debian/Ubuntu machine: both first run scripts/setup-host.sh.

SHELL       := /bin/bash
GO          ?= go
BIN         := bin
MODULE      := github.com/gpuvm/gpuvm
VERSION     ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
# go-nvml's cgo code prints hundreds of deprecation warnings; they are not ours.
export CGO_CFLAGS := -O2 -g -Wno-deprecated-declarations
LDFLAGS     := -s -w
# Every build of the binaries, and vet, compiles with -trimpath, as the
# package build (packaging/build.sh) does: the compiles are the same, so
# the build cache shares them (a fresh machine compiles the tree once for
# vet, the test binaries, the run and the package, not once each).
TRIM        := -trimpath
PLUGINS     := vgpu mig passthrough
RUN_STATE   ?= $(CURDIR)/.cache/run
RUN_LISTEN  ?= 127.0.0.1:8080

.PHONY: all setup novnc portal build test-bin guest desktop-image test-desktop-image run test unit lint generate check-generate fuzz clean package test-install bench-scale bench-homeio

all: build

setup:
	@bash scripts/setup-host.sh

# noVNC (npm @novnc/novnc, pinned and integrity-checked) for the browser
# console, which gpuvmd embeds; a build without it says so on the page.
novnc:
	@bash scripts/fetch-novnc.sh

# The web portal's npm packages (htm's Preact standalone module, which
# gpuvmd embeds; axe-core for its accessibility tests), pinned and
# integrity-checked; a build without them says so on the page.
portal:
	@bash scripts/fetch-portal.sh

build: novnc portal
	$(GO) build $(TRIM) -ldflags '$(LDFLAGS) -X main.version=$(VERSION)' -o $(BIN)/gpuvmd ./cmd/gpuvmd
	CGO_ENABLED=0 $(GO) build $(TRIM) -ldflags '$(LDFLAGS) -X main.version=$(VERSION)' -o $(BIN)/gpuvm ./cmd/gpuvm
	@for p in $(PLUGINS); do \
		echo "$(GO) build -o $(BIN)/plugins/gpuvm-backend-$$p ./plugins/$$p"; \
		$(GO) build $(TRIM) -ldflags '$(LDFLAGS) -X main.Version=$(VERSION)' -o $(BIN)/plugins/gpuvm-backend-$$p ./plugins/$$p || exit 1; \
	done

# The .deb in $(BIN)/pkg, built with nfpm
# (go tool nfpm, pinned in go.mod): packaging/build.sh says what goes in.
package: novnc portal
	@bash packaging/build.sh $(BIN)/pkg

# The package installed into a Debian bookworm root (mmdebstrap, cached in
# /var/cache/gpuvm): dependencies resolve, the binaries run, /etc/gpuvm
# validates, systemd-analyze verify accepts the units. Skips, saying why,
# when not root or without mmdebstrap.
test-install: package
	@bash test/install/run.sh $(BIN)/pkg

# The main job on its embedded defaults: a simulated GPU server when this
# machine has no NVIDIA GPU, state under .cache/run.
# The project's tiny test guest (kernel + busybox initrd from Debian
# packages), cached under test/guest/cache; configs/dev's profiles boot it.
guest:
	@bash test/guest/build.sh >/dev/null

# The desktop guest (test/guest/desktop/build.sh): a Debian bookworm qcow2
# with cloud-init, xrdp and IceWM, built with mmdebstrap (as root) and cached
# by content in test/guest/desktop/cache (GPUVM_DESKTOP_CACHE overrides);
# configs/dev's desktop profile boots it. The first build downloads about
# 200 MB of packages and takes about 5 minutes here; a current cache, a second.
desktop-image:
	@bash test/guest/desktop/build.sh >/dev/null

# make test builds it when it can (root); without it test/e2e's desktop test
# skips and says why.
# As root, make test keeps the image in /var/cache/gpuvm/desktop, which
# outlives checkouts (CI's fresh clones reuse it while its recipe and package
# versions are the same); `make desktop-image` keeps it in the checkout for
# configs/dev.
unit test-desktop-image: export GPUVM_DESKTOP_CACHE ?= $(if $(filter 0,$(shell id -u)),/var/cache/gpuvm/desktop,$(CURDIR)/test/guest/desktop/cache)

test-desktop-image:
	@if [ "$$(id -u)" -eq 0 ]; then bash test/guest/desktop/build.sh >/dev/null; \
	else echo "not root: no desktop image (test/e2e's TestDesktopOverRDP will skip)"; fi

# `make run DESKTOP=1` builds the desktop guest first (desktop-image), for
# configs/dev's desktop profile; without it that profile is unavailable
# (gpuvmd says so, and refuses its VMs) until the image is built.
run: setup build guest $(if $(DESKTOP),desktop-image)
	@if grep -qsx 0x10de /sys/bus/pci/devices/*/vendor; then \
		echo "NVIDIA GPU found: gpuvmd runs on the real host."; \
		exec $(BIN)/gpuvmd --listen $(RUN_LISTEN) --state-dir $(RUN_STATE); \
	else \
		echo "No NVIDIA GPU here: gpuvmd runs configs/dev, a simulated h100x8 server (it says so everywhere)."; \
		exec bash scripts/run-dev.sh $(BIN) $(RUN_STATE) $(RUN_LISTEN); \
	fi

# Every test: lint, generated code up to date, the race-enabled suite, the
# plugin binaries over go-plugin, and bounded fuzzing.
#
# What a fresh machine must first download and install with dpkg (minutes)
# is made in the background meanwhile, its output in .cache/test-roots.log:
# the desktop image (test/e2e's desktop test runs last in its package and
# waits for the build's lock), then test-install's Debian root (test-install
# waits for its lock). A failed build fails make test once the rest has run.
# The background build has TEST_ROOTS_TIMEOUT (a hung package mirror would
# keep make test waiting for ever): past it, it is sent TERM, and KILL 30
# seconds later if it is still there; make test then fails and says so.
TEST_ROOTS_TIMEOUT ?= 40m
test: setup novnc portal
	@mkdir -p .cache; \
	timeout -k 30s $(TEST_ROOTS_TIMEOUT) bash -c '$(MAKE) --no-print-directory test-desktop-image && bash test/install/run.sh --root' >.cache/test-roots.log 2>&1 & roots=$$!; \
	$(MAKE) --no-print-directory lint check-generate unit fuzz test-install; rc=$$?; \
	wait $$roots; roots_rc=$$?; \
	if [ $$roots_rc -eq 124 ] || [ $$roots_rc -eq 137 ]; then cat .cache/test-roots.log; echo "make test: the desktop image's or the install root's build ran over $(TEST_ROOTS_TIMEOUT) (TEST_ROOTS_TIMEOUT) and was stopped"; rc=1; \
	elif [ $$roots_rc -ne 0 ]; then cat .cache/test-roots.log; echo "make test: the desktop image's or the install root's build failed"; rc=1; fi; \
	exit $$rc

# PostgreSQL tests run against the local Debian cluster, which
# pkg/store/testdata/start-postgres.sh starts and prepares (as root); without
# it they skip and say why. test/e2e runs the real gpuvmd: its crash and
# real-libvirt tests need root and the libvirtd that `setup` starts (they
# skip without), and never restart it.
#
# The binaries tests run as processes (gpuvmd, the CLI as people get it,
# the backends, the test OpenID provider) are built once, into
# $(TESTBIN), rather than by each test package that runs them. Test
# binaries, about sixty, are linked without DWARF (-s -w: a third less
# link time; stack traces and the race detector's reports do not need it).
TESTBIN := $(CURDIR)/.cache/test-bin
test-bin:
	@rm -rf $(TESTBIN) && mkdir -p $(TESTBIN)/plugins
	$(GO) build $(TRIM) -ldflags '$(LDFLAGS)' -o $(TESTBIN)/gpuvmd ./cmd/gpuvmd
	CGO_ENABLED=0 $(GO) build $(TRIM) -ldflags '$(LDFLAGS)' -o $(TESTBIN)/gpuvm ./cmd/gpuvm
	$(GO) build $(TRIM) -ldflags '$(LDFLAGS)' -o $(TESTBIN)/oidcop ./test/oidcop
	@for p in $(PLUGINS); do $(GO) build $(TRIM) -ldflags '$(LDFLAGS)' -o $(TESTBIN)/plugins/gpuvm-backend-$$p ./plugins/$$p || exit 1; done

#
# The packages that boot real guests (test/e2e, test/system) spend minutes
# waiting on them (boot timeouts, libvirt's probes of QEMU) with the CPU
# idle: they start first, and three test binaries run at once (-p 3), so
# the others' work fills those waits (a clean run on two cores had two
# cores 5 % busy for 90 s at its end, the two waiting side by side). The
# packages that take longest besides them (pkg/portal and pkg/server, about
# 400 s each, less than half of it on a core) come next, then the busiest:
# in list order the two started 7 and 9 minutes in, and ended the run
# four minutes after the guests' (a run timed per test binary, with the
# CPU 16-46 % idle for five minutes while the guests booted).
#
# -trimpath: the test binaries' compiles are then the same in every
# checkout, so a fresh clone finds them in the build cache (without it,
# every package of the module is compiled again with -race: building every
# test binary took 129 s in a fresh clone, 57 s with it). A build cache
# without them pays once for the dependencies too (about three minutes
# more). Tests find the checkout from their working directory
# (test/testbin.Root).
FIRST_TESTS := ./test/e2e ./test/system ./pkg/portal ./pkg/server ./test/fleet ./pkg/orchestrator ./pkg/store ./test/plugins
unit: test-bin
	GPUVM_TEST_POSTGRES_DSN="$${GPUVM_TEST_POSTGRES_DSN:-$$(bash pkg/store/testdata/start-postgres.sh || true)}" \
	GPUVM_TEST_BIN=$(TESTBIN) $(GO) test -p 3 -race $(TRIM) -ldflags '$(LDFLAGS)' -count=1 -timeout 30m \
		$(FIRST_TESTS) $$($(GO) list ./... | grep -v -x $(foreach p,$(FIRST_TESTS),-e '$(MODULE)/$(patsubst ./%,%,$(p))'))
	# One goroutine's computations that -race slows tenfold (they skip
	# under it): the scheduler's claims on the example traces, the
	# estimate's replay against its reference, the bookings' property.
	# -trimpath: their dependencies are the compiles vet and test-bin made
	# (they find the binaries in $(TESTBIN), not by their source's path).
	GPUVM_TEST_BIN=$(TESTBIN) $(GO) test $(TRIM) -ldflags '$(LDFLAGS)' -count=1 \
		-run '^(TestExamplesBeatFirstFit|TestQueueIsTheReference|TestReservationProperty)$$' \
		./pkg/scheduler/simulate/ ./pkg/estimate/ ./pkg/orchestrator/

# The scale harness (test/bench/scale_test.go, issue #26): one real gpuvmd
# on a full simulated h100x8, its queue filled through the API by 200 users
# to each of GPUVM_SCALE_SIZES (default 1000,3000,10000); prints the create
# rate, every read route's p50/p99, idle CPU, RSS and the growth exponents.
# Not part of `make test` (which runs its small form, TestScaleGrowth).
# GPUVM_BENCH_PG=<postgres DSN> runs it on PostgreSQL.
bench-scale:
	$(GO) test -run '^$$' -bench '^BenchmarkScale$$' -benchtime 1x -timeout 120m ./test/bench/

# The home I/O benchmark (test/e2e/homeio_test.go, issue #27): from inside
# the tiny guest under a real libvirtd and QEMU (as root), a home over
# virtiofs against an ext4 data disk on virtio-blk, on one host file
# system: sequential write MB/s, small files made a second, random 4 KiB
# reads a second (O_DIRECT), and their ratios. Minutes; not part of
# `make test`.
bench-homeio: setup test-bin
	GPUVM_BENCH_HOMEIO=1 GPUVM_TEST_BIN=$(TESTBIN) $(GO) test -count=1 -v -run '^TestHomeIOBenchmark$$' -timeout 30m ./test/e2e/

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '\.pb\.go$$')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(TRIM) ./...
	# The CLI is pure Go for laptops: it must build for Windows and macOS
	# too. test/crosscheck type-checks it and all it imports from source as
	# those platforms' compiler would (seconds; the two cross builds it
	# replaced compiled the standard library and 260 packages twice more,
	# four minutes of a fresh machine's make test).
	$(GO) run ./test/crosscheck -goos windows,darwin ./cmd/gpuvm

generate:
	$(GO) generate ./pkg/backend/proto/

check-generate: generate
	@git diff --exit-code -- pkg/backend/proto/ || { echo "generated code is stale: run 'make generate' and commit"; exit 1; }

# Bounded by executions, not seconds: a time-bounded run can end with a
# spurious "context deadline exceeded" from the fuzzing engine on a loaded
# machine. FuzzLoad parses whole configurations and is slower per input.
FUZZN ?= 100000
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzParseVGPUType$$' -fuzztime $(FUZZN)x ./pkg/gpu/
	$(GO) test -run '^$$' -fuzz '^FuzzParseCreatableVGPUTypes$$' -fuzztime $(FUZZN)x ./pkg/host/
	$(GO) test -run '^$$' -fuzz '^FuzzParseMdevDescription$$' -fuzztime $(FUZZN)x ./pkg/host/
	$(GO) test -run '^$$' -fuzz '^FuzzLoad$$' -fuzztime 500x ./pkg/config/

clean:
	rm -rf $(BIN) .cache
