package monitor

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"reflect"
	"strings"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpuvm/gpuvm/pkg/gpu"
	"github.com/gpuvm/gpuvm/pkg/host"
)

// NVMLSource reads GPUs through NVML (an nvml.Interface, initialised):
//
//   - per GPU: utilisation (GPU, memory, encoder, decoder), framebuffer
//     used and total, temperature, power, SM clock, uncorrected ECC errors,
//     and XID errors (critical-error events, counted between rounds);
//   - per time-sliced vGPU (DeviceGetActiveVgpus): its SM, memory, encoder
//     and decoder utilisation (DeviceGetVgpuUtilization, read
//     incrementally from the last sample seen; DeviceGetVgpuProcessUtilization
//     summed per vGPU where the first is not supported) and framebuffer use;
//   - per MIG GPU instance: placement and memory (MIG device handles), and
//     on GPUs with GPM (Hopper and later) SM and memory-bandwidth
//     utilisation from two GPM samples a round apart; the MIG-backed vGPU
//     on an instance is folded into it.
//
// A figure NVML does not support on a GPU is Unknown. A call that a go-nvml
// mock leaves out (the simulator's NVML, a test's) panics in the mock; the
// source takes that as ERROR_NOT_SUPPORTED, so that a mock serves only what
// it implements.
type NVMLSource struct {
	lib nvml.Interface

	mu sync.Mutex
	// vgpuSeen is, per GPU, the timestamp of the newest vGPU utilisation
	// sample read: the next read asks only for newer ones.
	vgpuSeen map[string]uint64
	// events receives XID errors; nil until created (eventsTried then
	// stops retrying a library that has no events).
	events      nvml.EventSet
	eventsTried bool
	registered  map[string]bool // GPUs whose XID events are registered, by UUID
	// gpm holds the previous GPM sample of each MIG instance.
	gpm map[gpmKey]nvml.GpmSample
}

type gpmKey struct {
	gpu string
	gi  int
}

// NewNVMLSource reads lib, which must be initialised (host.OpenNVML).
func NewNVMLSource(lib nvml.Interface) *NVMLSource {
	return &NVMLSource{lib: lib, vgpuSeen: map[string]uint64{}, registered: map[string]bool{}, gpm: map[gpmKey]nvml.GpmSample{}}
}

// Describe implements Source.
func (s *NVMLSource) Describe() string { return "NVML" }

// Close frees the event set and GPM samples.
func (s *NVMLSource) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.events != nil {
		try0(s.events.Free)
		s.events = nil
	}
	for k, smp := range s.gpm {
		try0(smp.Free)
		delete(s.gpm, k)
	}
}

// try calls an NVML function; a mock's missing function (a panic) is
// ERROR_NOT_SUPPORTED.
func try[T any](f func() (T, nvml.Return)) (v T, ret nvml.Return) {
	defer func() {
		if recover() != nil {
			var zero T
			v, ret = zero, nvml.ERROR_NOT_SUPPORTED
		}
	}()
	return f()
}

func try0(f func() nvml.Return) (ret nvml.Return) {
	defer func() {
		if recover() != nil {
			ret = nvml.ERROR_NOT_SUPPORTED
		}
	}()
	return f()
}

type pair struct{ a, b uint32 }

func try2(f func() (uint32, uint32, nvml.Return)) (pair, nvml.Return) {
	return try(func() (pair, nvml.Return) {
		a, b, r := f()
		return pair{a, b}, r
	})
}

// Read implements Source.
func (s *NVMLSource) Read(ctx context.Context) (Reading, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var r Reading
	n, ret := try(s.lib.DeviceGetCount)
	if ret != nvml.SUCCESS {
		return r, fmt.Errorf("count GPUs through NVML: %s", ret.Error())
	}
	s.setUpEvents(&r)
	devs := make([]nvml.Device, 0, n)
	for i := range n {
		dev, ret := try(func() (nvml.Device, nvml.Return) { return s.lib.DeviceGetHandleByIndex(i) })
		if ret != nvml.SUCCESS {
			r.Notes = append(r.Notes, fmt.Sprintf("GPU %d: get its handle: %s", i, ret.Error()))
			continue
		}
		devs = append(devs, dev)
	}
	xids := s.readXIDs(&r)
	liveGPM := map[gpmKey]bool{}
	for _, dev := range devs {
		if err := ctx.Err(); err != nil {
			return r, err
		}
		g, ok := s.readGPU(dev, &r)
		if !ok {
			continue
		}
		g.XIDErrors = xids[g.UUID]
		r.GPUs = append(r.GPUs, g)
		ins := s.readVGPUs(dev, g.Address, &r)
		if g.MIG {
			ins = append(ins, s.readMIG(dev, g, liveGPM, &r)...)
		}
		r.Instances = append(r.Instances, mergeMIGBacked(ins)...)
	}
	for k, smp := range s.gpm {
		if !liveGPM[k] {
			try0(smp.Free)
			delete(s.gpm, k)
		}
	}
	return r, nil
}

// readGPU reads one GPU; false when its PCI address cannot be read.
func (s *NVMLSource) readGPU(dev nvml.Device, r *Reading) (GPUReading, bool) {
	pci, ret := try(dev.GetPciInfo)
	if ret != nvml.SUCCESS {
		r.Notes = append(r.Notes, "a GPU's PCI address: "+ret.Error())
		return GPUReading{}, false
	}
	busID := cString(pci.BusId[:])
	if busID == "" {
		busID = cString(pci.BusIdLegacy[:])
	}
	if busID == "" {
		r.Notes = append(r.Notes, "a GPU reports no PCI address: it is not sampled")
		return GPUReading{}, false
	}
	g := NewGPUReading(host.AddressFromNVML(busID))
	g.Model, _ = try(dev.GetName)
	g.UUID, _ = try(dev.GetUUID)
	if u, ret := try(dev.GetUtilizationRates); ret == nvml.SUCCESS {
		g.Util, g.MemUtil = percent(u.Gpu), percent(u.Memory)
	}
	if u, ret := try2(dev.GetEncoderUtilization); ret == nvml.SUCCESS {
		g.EncUtil = percent(u.a)
	}
	if u, ret := try2(dev.GetDecoderUtilization); ret == nvml.SUCCESS {
		g.DecUtil = percent(u.a)
	}
	if m, ret := try(dev.GetMemoryInfo); ret == nvml.SUCCESS {
		g.MemUsed, g.MemTotal = clampInt64(m.Used), clampInt64(m.Total)
	}
	if t, ret := try(func() (uint32, nvml.Return) { return dev.GetTemperature(nvml.TEMPERATURE_GPU) }); ret == nvml.SUCCESS {
		g.Temperature = float64(t)
	}
	if p, ret := try(dev.GetPowerUsage); ret == nvml.SUCCESS {
		g.PowerWatts = float64(p) / 1000
	}
	if c, ret := try(func() (uint32, nvml.Return) { return dev.GetClockInfo(nvml.CLOCK_SM) }); ret == nvml.SUCCESS {
		g.SMClockMHz = int(c)
	}
	if e, ret := try(func() (uint64, nvml.Return) {
		return dev.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.VOLATILE_ECC)
	}); ret == nvml.SUCCESS {
		g.ECCErrors = int(min(e, math.MaxInt32))
	}
	if mode, ret := try2(func() (uint32, uint32, nvml.Return) {
		cur, pend, ret := dev.GetMigMode()
		return uint32(cur), uint32(pend), ret
	}); ret == nvml.SUCCESS {
		g.MIG = int(mode.a) == nvml.DEVICE_MIG_ENABLE
	}
	if g.UUID != "" && s.events != nil && !s.registered[g.UUID] {
		ret := try0(func() nvml.Return { return dev.RegisterEvents(nvml.EventTypeXidCriticalError, s.events) })
		switch ret {
		case nvml.SUCCESS:
			s.registered[g.UUID] = true
		case nvml.ERROR_NOT_SUPPORTED:
			s.registered[g.UUID] = true // nothing to wait for
		default:
			r.Notes = append(r.Notes, fmt.Sprintf("GPU %s: register for XID events: %s", g.Address, ret.Error()))
		}
	}
	return g, true
}

// setUpEvents creates the event set XID errors arrive on, once.
func (s *NVMLSource) setUpEvents(r *Reading) {
	if s.eventsTried {
		return
	}
	s.eventsTried = true
	set, ret := try(s.lib.EventSetCreate)
	if ret != nvml.SUCCESS {
		if ret != nvml.ERROR_NOT_SUPPORTED {
			r.Notes = append(r.Notes, "XID errors are not counted: create an NVML event set: "+ret.Error())
		}
		return
	}
	s.events = set
}

// readXIDs counts, per GPU UUID, the XID events that arrived since the
// last round, without waiting.
func (s *NVMLSource) readXIDs(r *Reading) map[string]int {
	if s.events == nil {
		return nil
	}
	out := map[string]int{}
	for range 1000 { // a storm of events does not hold the round
		e, ret := try(func() (nvml.EventData, nvml.Return) { return s.events.Wait(0) })
		if ret == nvml.ERROR_TIMEOUT || ret == nvml.ERROR_NOT_SUPPORTED {
			break
		}
		if ret != nvml.SUCCESS {
			r.Notes = append(r.Notes, "read XID events: "+ret.Error())
			break
		}
		if e.EventType&nvml.EventTypeXidCriticalError == 0 || e.Device == nil {
			continue
		}
		if u, ret := try(e.Device.GetUUID); ret == nvml.SUCCESS {
			out[u]++
		}
	}
	return out
}

// maxGPUInstanceID bounds real GPU instance IDs (a few per GPU); NVML's
// "no instance" is 0xFFFFFFFF.
const maxGPUInstanceID = 1 << 16

// vgpuUtil is the newest utilisation sample of a vGPU.
type vgpuUtil struct {
	ts                 uint64
	sm, mem, enc, dec  float64
	fromProcessSamples bool
}

// readVGPUs reads the vGPUs that run on a GPU.
func (s *NVMLSource) readVGPUs(dev nvml.Device, addr string, r *Reading) []InstanceReading {
	vis, ret := try(dev.GetActiveVgpus)
	if ret != nvml.SUCCESS || len(vis) == 0 {
		if ret != nvml.SUCCESS && ret != nvml.ERROR_NOT_SUPPORTED {
			r.Notes = append(r.Notes, fmt.Sprintf("GPU %s: list its vGPUs: %s", addr, ret.Error()))
		}
		return nil
	}
	utils := s.readVGPUUtil(dev, addr, r)
	out := make([]InstanceReading, 0, len(vis))
	for _, vi := range vis {
		in := NewInstanceReading(addr, gpu.KindVGPU)
		if u, ret := try(vi.GetMdevUUID); ret == nvml.SUCCESS && strings.Trim(u, "\x00 ") != "" {
			in.ID = strings.ToLower(strings.Trim(u, "\x00 "))
		} else if p, ret := try(vi.GetGpuPciId); ret == nvml.SUCCESS && strings.Trim(p, "\x00 ") != "" {
			in.ID = host.AddressFromNVML(p)
		} else if u, ret := try(vi.GetUUID); ret == nvml.SUCCESS {
			in.ID = "vgpu:" + u
		}
		if fb, ret := try(vi.GetFbUsage); ret == nvml.SUCCESS {
			in.MemUsed = clampInt64(fb)
		}
		if t, ret := try(vi.GetType); ret == nvml.SUCCESS && t != nil {
			if name, ret := try(t.GetName); ret == nvml.SUCCESS {
				in.Type = canonicalVGPUType(name)
			}
			if fb, ret := try(t.GetFramebufferSize); ret == nvml.SUCCESS {
				in.MemTotal = clampInt64(fb)
			}
		}
		in.License = vgpuLicense(vi)
		// A time-sliced vGPU answers INVALID_GPU_INSTANCE_ID (0xFFFFFFFF).
		if gi, ret := try(vi.GetGpuInstanceId); ret == nvml.SUCCESS && gi >= 0 && gi < maxGPUInstanceID {
			in.GPUInstance = gi
		}
		if h, ok := vgpuHandle(vi); ok {
			if u, ok := utils[h]; ok {
				in.Util, in.MemUtil = u.sm, u.mem
				if !u.fromProcessSamples {
					in.EncUtil, in.DecUtil = u.enc, u.dec
				}
			} else if len(utils) > 0 {
				// Samples came for other vGPUs and none for this one: NVML
				// reports only vGPUs that did something.
				in.Util, in.MemUtil = 0, 0
			}
		}
		out = append(out, in)
	}
	return out
}

// vgpuLicense is a vGPU's licence state from NVML's licence info (its
// CurrentState; IsLicensed where the state is not known), "" when NVML
// cannot say (no guest driver has reported yet, or not supported).
func vgpuLicense(vi nvml.VgpuInstance) string {
	info, ret := try(vi.GetLicenseInfo)
	if ret != nvml.SUCCESS {
		return ""
	}
	switch info.CurrentState {
	case nvml.GRID_LICENSE_STATE_LICENSED:
		return LicenseLicensed
	case nvml.GRID_LICENSE_STATE_UNLICENSED_UNRESTRICTED:
		return LicenseGrace
	case nvml.GRID_LICENSE_STATE_UNLICENSED_RESTRICTED, nvml.GRID_LICENSE_STATE_UNLICENSED:
		return LicenseUnlicensed
	}
	if info.IsLicensed != 0 {
		return LicenseLicensed
	}
	return ""
}

// readVGPUUtil reads the vGPU utilisation samples newer than the last seen,
// keeping the newest per vGPU. nil when the GPU reports none.
func (s *NVMLSource) readVGPUUtil(dev nvml.Device, addr string, r *Reading) map[uint32]vgpuUtil {
	type answer struct {
		vt      nvml.ValueType
		samples []nvml.VgpuInstanceUtilizationSample
	}
	last := s.vgpuSeen[addr]
	a, ret := try(func() (answer, nvml.Return) {
		vt, smp, ret := dev.GetVgpuUtilization(last)
		return answer{vt, smp}, ret
	})
	out := map[uint32]vgpuUtil{}
	switch ret {
	case nvml.SUCCESS:
		for _, smp := range a.samples {
			cur, ok := out[smp.VgpuInstance]
			if ok && cur.ts >= smp.TimeStamp {
				continue
			}
			out[smp.VgpuInstance] = vgpuUtil{ts: smp.TimeStamp, sm: decodeValue(a.vt, smp.SmUtil), mem: decodeValue(a.vt, smp.MemUtil),
				enc: decodeValue(a.vt, smp.EncUtil), dec: decodeValue(a.vt, smp.DecUtil)}
			s.vgpuSeen[addr] = max(s.vgpuSeen[addr], smp.TimeStamp)
		}
		return out
	case nvml.ERROR_NOT_SUPPORTED:
	case nvml.ERROR_NOT_FOUND: // no sample newer than the last seen: not known
		return nil
	default:
		r.Notes = append(r.Notes, fmt.Sprintf("GPU %s: read vGPU utilisation: %s", addr, ret.Error()))
		return nil
	}
	// Per-process samples, summed per vGPU (only processes that did
	// something are reported).
	procs, ret := try(func() ([]nvml.VgpuProcessUtilizationSample, nvml.Return) { return dev.GetVgpuProcessUtilization(last) })
	switch ret {
	case nvml.SUCCESS:
	case nvml.ERROR_NOT_FOUND:
		return out
	case nvml.ERROR_NOT_SUPPORTED:
		return nil
	default:
		r.Notes = append(r.Notes, fmt.Sprintf("GPU %s: read vGPU process utilisation: %s", addr, ret.Error()))
		return nil
	}
	newest := map[uint32]uint64{}
	for _, p := range procs {
		newest[p.VgpuInstance] = max(newest[p.VgpuInstance], p.TimeStamp)
	}
	for _, p := range procs {
		if p.TimeStamp != newest[p.VgpuInstance] {
			continue
		}
		u := out[p.VgpuInstance]
		u.ts, u.fromProcessSamples = p.TimeStamp, true
		u.sm = math.Min(1, u.sm+percent(p.SmUtil))
		u.mem = math.Min(1, u.mem+percent(p.MemUtil))
		out[p.VgpuInstance] = u
		s.vgpuSeen[addr] = max(s.vgpuSeen[addr], p.TimeStamp)
	}
	return out
}

// readMIG reads the MIG GPU instances of a GPU: placement and size from
// the GPU instance profiles, memory in use from the MIG device handles, and
// utilisation from GPM where the GPU has it.
func (s *NVMLSource) readMIG(dev nvml.Device, g GPUReading, liveGPM map[gpmKey]bool, r *Reading) []InstanceReading {
	var model *gpu.Model
	if pci, ret := try(dev.GetPciInfo); ret == nvml.SUCCESS {
		if m, ok := gpu.ModelByID(uint16(pci.PciDeviceId >> 16)); ok && m.MIG != nil {
			model = &m
		}
	}
	byGI := map[int]int{}
	var out []InstanceReading
	for idx := range nvml.GPU_INSTANCE_PROFILE_COUNT {
		info, ret := try(func() (nvml.GpuInstanceProfileInfo, nvml.Return) { return dev.GetGpuInstanceProfileInfo(idx) })
		if ret != nvml.SUCCESS {
			continue
		}
		gis, ret := try(func() ([]nvml.GpuInstance, nvml.Return) { return dev.GetGpuInstances(&info) })
		if ret != nvml.SUCCESS {
			continue
		}
		for _, gi := range gis {
			gii, ret := try(gi.GetInfo)
			if ret != nvml.SUCCESS {
				continue
			}
			in := NewInstanceReading(g.Address, gpu.KindMIG)
			in.GPUInstance, in.PlacementStart = int(gii.Id), int(gii.Placement.Start)
			in.MemTotal = clampInt64(info.MemorySizeMB << 20)
			if model != nil {
				for _, p := range model.MIG.Profiles {
					if p.NVMLProfile == idx {
						in.Type = p.Name
					}
				}
			}
			byGI[in.GPUInstance] = len(out)
			out = append(out, in)
		}
	}
	// Memory in use, from the MIG devices (one per compute instance).
	if n, ret := try(dev.GetMaxMigDeviceCount); ret == nvml.SUCCESS {
		for j := range n {
			md, ret := try(func() (nvml.Device, nvml.Return) { return dev.GetMigDeviceHandleByIndex(j) })
			if ret != nvml.SUCCESS {
				continue
			}
			gi, ret := try(md.GetGpuInstanceId)
			if ret != nvml.SUCCESS {
				continue
			}
			k, ok := byGI[gi]
			if !ok {
				continue
			}
			if m, ret := try(md.GetMemoryInfo); ret == nvml.SUCCESS {
				out[k].MemUsed = clampInt64(m.Used)
				if m.Total > 0 {
					out[k].MemTotal = clampInt64(m.Total)
				}
			}
		}
	}
	s.readGPM(dev, g.Address, out, liveGPM, r)
	return out
}

// readGPM sets the SM and memory-bandwidth utilisation of each MIG
// instance from GPM: a sample per instance each round, the metrics between
// it and the previous round's.
func (s *NVMLSource) readGPM(dev nvml.Device, addr string, ins []InstanceReading, live map[gpmKey]bool, r *Reading) {
	sup, ret := try(dev.GpmQueryDeviceSupport)
	if ret != nvml.SUCCESS || sup.IsSupportedDevice == 0 {
		return
	}
	for i := range ins {
		k := gpmKey{addr, ins[i].GPUInstance}
		smp, ret := try(s.lib.GpmSampleAlloc)
		if ret != nvml.SUCCESS {
			r.Notes = append(r.Notes, "allocate a GPM sample: "+ret.Error())
			return
		}
		if ret := try0(func() nvml.Return { return dev.GpmMigSampleGet(ins[i].GPUInstance, smp) }); ret != nvml.SUCCESS {
			try0(smp.Free)
			r.Notes = append(r.Notes, fmt.Sprintf("GPU %s: GPM sample of GPU instance %d: %s", addr, ins[i].GPUInstance, ret.Error()))
			continue
		}
		live[k] = true
		prev, ok := s.gpm[k]
		s.gpm[k] = smp
		if !ok {
			continue // the first sample: figures from the next round on
		}
		m := &nvml.GpmMetricsGetType{NumMetrics: 2, Sample1: prev, Sample2: smp}
		m.Metrics[0].MetricId = uint32(nvml.GPM_METRIC_SM_UTIL)
		m.Metrics[1].MetricId = uint32(nvml.GPM_METRIC_DRAM_BW_UTIL)
		ret = try0(func() nvml.Return { return s.lib.GpmMetricsGet(m) })
		try0(prev.Free)
		if ret != nvml.SUCCESS {
			r.Notes = append(r.Notes, fmt.Sprintf("GPU %s: GPM metrics of GPU instance %d: %s", addr, ins[i].GPUInstance, ret.Error()))
			continue
		}
		if m.Metrics[0].NvmlReturn == uint32(nvml.SUCCESS) {
			ins[i].Util = clampRatio(m.Metrics[0].Value / 100)
		}
		if m.Metrics[1].NvmlReturn == uint32(nvml.SUCCESS) {
			ins[i].MemUtil = clampRatio(m.Metrics[1].Value / 100)
		}
	}
}

// vgpuHandle is the number NVML's utilisation samples name a vGPU by. The
// real library's VgpuInstance is that number; a test's may say it through
// a Handle method.
func vgpuHandle(vi nvml.VgpuInstance) (uint32, bool) {
	if h, ok := vi.(interface{ Handle() uint32 }); ok {
		return h.Handle(), true
	}
	v := reflect.ValueOf(vi)
	if v.Kind() == reflect.Uint32 {
		return uint32(v.Uint()), true
	}
	return 0, false
}

// decodeValue reads a utilisation (percent) from an NVML value union as a
// ratio; Unknown for a type it cannot hold.
func decodeValue(vt nvml.ValueType, b [8]byte) float64 {
	var v float64
	switch vt {
	case nvml.VALUE_TYPE_UNSIGNED_INT:
		v = float64(binary.LittleEndian.Uint32(b[:4]))
	case nvml.VALUE_TYPE_UNSIGNED_LONG, nvml.VALUE_TYPE_UNSIGNED_LONG_LONG:
		v = float64(binary.LittleEndian.Uint64(b[:]))
	case nvml.VALUE_TYPE_SIGNED_LONG_LONG:
		v = float64(int64(binary.LittleEndian.Uint64(b[:])))
	case nvml.VALUE_TYPE_SIGNED_INT:
		v = float64(int32(binary.LittleEndian.Uint32(b[:4])))
	case nvml.VALUE_TYPE_UNSIGNED_SHORT:
		v = float64(binary.LittleEndian.Uint16(b[:2]))
	case nvml.VALUE_TYPE_DOUBLE:
		v = math.Float64frombits(binary.LittleEndian.Uint64(b[:]))
	default:
		return Unknown
	}
	return clampRatio(v / 100)
}

// canonicalVGPUType turns the driver's name of a vGPU type ("GRID
// A100-4C", "NVIDIA L40S-12Q") into gpuvm's ("A100-4C").
func canonicalVGPUType(name string) string {
	name = strings.TrimSpace(strings.Trim(name, "\x00"))
	if t, err := gpu.ParseVGPUType(name); err == nil {
		return t.Name
	}
	return name
}

func percent(p uint32) float64 { return clampRatio(float64(p) / 100) }

func clampRatio(v float64) float64 {
	switch {
	case math.IsNaN(v) || v < 0:
		return Unknown
	case v > 1:
		return 1
	}
	return v
}

func clampInt64(v uint64) int64 { return int64(min(v, math.MaxInt64)) }

// cString reads a NUL-terminated C string.
func cString(b []int8) string {
	var sb strings.Builder
	for _, c := range b {
		if c == 0 {
			break
		}
		sb.WriteByte(byte(c))
	}
	return sb.String()
}
