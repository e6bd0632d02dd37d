package monitor

import (
	"encoding/binary"
	"fmt"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// mockHost is go-nvml's mock server with what the monitor reads filled in:
// figures per GPU, vGPUs with utilisation samples, MIG devices, XID events
// and GPM samples, all settable by the test.
type mockHost struct {
	*server.Server
	mu     sync.Mutex
	gpus   []*mockGPU
	events []nvml.EventData // XID events waiting to be read
	// gpmValue gives the SM and DRAM utilisation (percent) GPM reports for
	// a GPU instance between two samples.
	gpmValue func(gpu string, gi int) (sm, dram float64)
	gpmNext  int
}

type mockGPU struct {
	dev                     *server.Device
	addr                    string
	util, mem, enc, dec     uint32
	temp, powerMW, clockMHz uint32
	ecc                     uint64
	vgpus                   []*mockVGPU
	vgpuTS                  uint64
	migMem                  map[int]uint64 // GPU instance → bytes used
	gpm                     bool
	registered              bool
}

// mockVGPU is a vGPU; Handle is what NVML's utilisation samples name it by.
type mockVGPU struct {
	*mock.VgpuInstance
	handle            uint32
	sm, mem, enc, dec uint32
	fb                uint64
	noSamples         bool
}

func (v *mockVGPU) Handle() uint32 { return v.handle }

// newMockHost makes n GPUs of a model (A100 or H100), at PCI buses 0x10,
// 0x11, …
func newMockHost(n int, cfg gpus.Config) *mockHost {
	s, err := server.New(server.WithGPUs(gpus.Multiple(n, cfg)...), server.WithDriverVersion("550.54.15"))
	if err != nil {
		panic(err)
	}
	h := &mockHost{Server: s}
	for i, d := range s.Devices {
		dev := d.(*server.Device)
		g := &mockGPU{dev: dev, addr: fmt.Sprintf("0000:%02x:00.0", 0x10+i), util: 50, mem: 20, temp: 60, powerMW: 250000, clockMHz: 1410,
			migMem: map[int]uint64{}}
		h.gpus = append(h.gpus, g)
		h.wire(g)
	}
	s.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) {
		return &mock.EventSet{
			WaitFunc: func(uint32) (nvml.EventData, nvml.Return) {
				h.mu.Lock()
				defer h.mu.Unlock()
				if len(h.events) == 0 {
					return nvml.EventData{}, nvml.ERROR_TIMEOUT
				}
				e := h.events[0]
				h.events = h.events[1:]
				return e, nvml.SUCCESS
			},
			FreeFunc: func() nvml.Return { return nvml.SUCCESS },
		}, nvml.SUCCESS
	}
	s.GpmSampleAllocFunc = func() (nvml.GpmSample, nvml.Return) {
		h.mu.Lock()
		h.gpmNext++
		id := h.gpmNext
		h.mu.Unlock()
		return &gpmSample{id: id}, nvml.SUCCESS
	}
	s.GpmMetricsGetFunc = func(m *nvml.GpmMetricsGetType) nvml.Return {
		s1, s2 := m.Sample1.(*gpmSample), m.Sample2.(*gpmSample)
		if s1.gpu != s2.gpu || s1.gi != s2.gi || s1.id >= s2.id {
			return nvml.ERROR_INVALID_ARGUMENT
		}
		sm, dram := h.gpmValue(s2.gpu, s2.gi)
		for i := range m.NumMetrics {
			switch nvml.GpmMetricId(m.Metrics[i].MetricId) {
			case nvml.GPM_METRIC_SM_UTIL:
				m.Metrics[i].Value = sm
			case nvml.GPM_METRIC_DRAM_BW_UTIL:
				m.Metrics[i].Value = dram
			default:
				m.Metrics[i].NvmlReturn = uint32(nvml.ERROR_NOT_SUPPORTED)
			}
		}
		return nvml.SUCCESS
	}
	h.gpmValue = func(string, int) (float64, float64) { return 0, 0 }
	return h
}

// gpmSample is a GPM sample that remembers what it sampled.
type gpmSample struct {
	mock.GpmSample
	id  int
	gpu string
	gi  int
}

func (g *gpmSample) Free() nvml.Return { return nvml.SUCCESS }

func (h *mockHost) wire(g *mockGPU) {
	d := g.dev
	d.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) {
		p := nvml.PciInfo{PciDeviceId: d.Config.PciDeviceId}
		for i, c := range "0000" + g.addr {
			p.BusId[i] = int8(c)
		}
		return p, nvml.SUCCESS
	}
	d.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) {
		h.mu.Lock()
		defer h.mu.Unlock()
		return nvml.Utilization{Gpu: g.util, Memory: g.mem}, nvml.SUCCESS
	}
	d.GetEncoderUtilizationFunc = func() (uint32, uint32, nvml.Return) { return g.enc, 167000, nvml.SUCCESS }
	d.GetDecoderUtilizationFunc = func() (uint32, uint32, nvml.Return) { return g.dec, 167000, nvml.SUCCESS }
	d.GetTemperatureFunc = func(s nvml.TemperatureSensors) (uint32, nvml.Return) {
		h.mu.Lock()
		defer h.mu.Unlock()
		return g.temp, nvml.SUCCESS
	}
	d.GetPowerUsageFunc = func() (uint32, nvml.Return) { return g.powerMW, nvml.SUCCESS }
	d.GetClockInfoFunc = func(c nvml.ClockType) (uint32, nvml.Return) {
		if c != nvml.CLOCK_SM {
			return 0, nvml.ERROR_INVALID_ARGUMENT
		}
		return g.clockMHz, nvml.SUCCESS
	}
	d.GetTotalEccErrorsFunc = func(t nvml.MemoryErrorType, c nvml.EccCounterType) (uint64, nvml.Return) {
		if t != nvml.MEMORY_ERROR_TYPE_UNCORRECTED || c != nvml.VOLATILE_ECC {
			return 0, nvml.ERROR_INVALID_ARGUMENT
		}
		return g.ecc, nvml.SUCCESS
	}
	d.RegisterEventsFunc = func(types uint64, _ nvml.EventSet) nvml.Return {
		if types&nvml.EventTypeXidCriticalError == 0 {
			return nvml.ERROR_INVALID_ARGUMENT
		}
		g.registered = true
		return nvml.SUCCESS
	}
	d.GetActiveVgpusFunc = func() ([]nvml.VgpuInstance, nvml.Return) {
		out := make([]nvml.VgpuInstance, len(g.vgpus))
		for i, v := range g.vgpus {
			out[i] = v
		}
		return out, nvml.SUCCESS
	}
	d.GetVgpuUtilizationFunc = func(last uint64) (nvml.ValueType, []nvml.VgpuInstanceUtilizationSample, nvml.Return) {
		h.mu.Lock()
		defer h.mu.Unlock()
		g.vgpuTS += 1000000
		var out []nvml.VgpuInstanceUtilizationSample
		for _, v := range g.vgpus {
			if v.noSamples {
				continue
			}
			// An older sample first: the source must keep the newest.
			out = append(out, utilSample(v.handle, g.vgpuTS-500000, 99, 99, 99, 99), utilSample(v.handle, g.vgpuTS, v.sm, v.mem, v.enc, v.dec))
		}
		if last >= g.vgpuTS {
			return nvml.VALUE_TYPE_UNSIGNED_INT, nil, nvml.ERROR_NOT_FOUND
		}
		return nvml.VALUE_TYPE_UNSIGNED_INT, out, nvml.SUCCESS
	}
	d.GetMaxMigDeviceCountFunc = func() (int, nvml.Return) { return 7, nvml.SUCCESS }
	d.GetMigDeviceHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) {
		d.RLock()
		defer d.RUnlock()
		var ids []int
		for gi := range d.GpuInstances {
			ids = append(ids, int(gi.Info.Id))
		}
		if i >= len(ids) {
			return nil, nvml.ERROR_NOT_FOUND
		}
		gi := sortInts(ids)[i]
		md := &mock.Device{}
		md.GetGpuInstanceIdFunc = func() (int, nvml.Return) { return gi, nvml.SUCCESS }
		md.GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) {
			h.mu.Lock()
			defer h.mu.Unlock()
			return nvml.Memory{Used: g.migMem[gi]}, nvml.SUCCESS
		}
		return md, nvml.SUCCESS
	}
	d.GpmQueryDeviceSupportFunc = func() (nvml.GpmSupport, nvml.Return) {
		if !g.gpm {
			return nvml.GpmSupport{}, nvml.SUCCESS
		}
		return nvml.GpmSupport{IsSupportedDevice: 1}, nvml.SUCCESS
	}
	d.GpmMigSampleGetFunc = func(gi int, smp nvml.GpmSample) nvml.Return {
		s := smp.(*gpmSample)
		s.gpu, s.gi = g.addr, gi
		return nvml.SUCCESS
	}
}

func utilSample(handle uint32, ts uint64, sm, mem, enc, dec uint32) nvml.VgpuInstanceUtilizationSample {
	s := nvml.VgpuInstanceUtilizationSample{VgpuInstance: handle, TimeStamp: ts}
	binary.LittleEndian.PutUint32(s.SmUtil[:4], sm)
	binary.LittleEndian.PutUint32(s.MemUtil[:4], mem)
	binary.LittleEndian.PutUint32(s.EncUtil[:4], enc)
	binary.LittleEndian.PutUint32(s.DecUtil[:4], dec)
	return s
}

func sortInts(xs []int) []int {
	for i := 1; i < len(xs); i++ {
		for j := i; j > 0 && xs[j] < xs[j-1]; j-- {
			xs[j], xs[j-1] = xs[j-1], xs[j]
		}
	}
	return xs
}

// addVGPU puts a time-sliced vGPU on GPU i: an mdev (id a UUID) or a VF
// (id a PCI address), or a MIG-backed one on GPU instance gi (≥ 0).
func (h *mockHost) addVGPU(i int, id, typeName string, fb uint64, gi int, sm uint32) *mockVGPU {
	g := h.gpus[i]
	v := &mockVGPU{VgpuInstance: &mock.VgpuInstance{}, handle: uint32(100*i + len(g.vgpus) + 1), sm: sm, mem: sm / 2, enc: 3, dec: 4, fb: fb}
	isVF := len(id) == len("0000:00:00.0") && id[4] == ':'
	v.GetMdevUUIDFunc = func() (string, nvml.Return) {
		if isVF {
			return "", nvml.ERROR_NOT_SUPPORTED
		}
		return id, nvml.SUCCESS
	}
	v.GetGpuPciIdFunc = func() (string, nvml.Return) {
		if !isVF {
			return "", nvml.SUCCESS
		}
		return "0000" + id, nvml.SUCCESS
	}
	v.GetFbUsageFunc = func() (uint64, nvml.Return) { return v.fb, nvml.SUCCESS }
	v.GetTypeFunc = func() (nvml.VgpuTypeId, nvml.Return) {
		return &mock.VgpuTypeId{
			GetNameFunc:            func() (string, nvml.Return) { return "GRID " + typeName, nvml.SUCCESS },
			GetFramebufferSizeFunc: func() (uint64, nvml.Return) { return 4 << 30, nvml.SUCCESS },
		}, nvml.SUCCESS
	}
	v.GetGpuInstanceIdFunc = func() (int, nvml.Return) {
		if gi < 0 {
			return 0xFFFFFFFF, nvml.SUCCESS
		}
		return gi, nvml.SUCCESS
	}
	g.vgpus = append(g.vgpus, v)
	return v
}

// addGI makes a GPU instance of a profile (nvml.GPU_INSTANCE_PROFILE_*) at
// a placement on GPU i, in MIG mode.
func (h *mockHost) addGI(i, profile, start int) int {
	g := h.gpus[i]
	g.dev.MigMode = nvml.DEVICE_MIG_ENABLE
	info, ret := g.dev.GetGpuInstanceProfileInfo(profile)
	if ret != nvml.SUCCESS {
		panic(ret)
	}
	gi, ret := g.dev.CreateGpuInstanceWithPlacement(&info, &nvml.GpuInstancePlacement{Start: uint32(start), Size: info.SliceCount})
	if ret != nvml.SUCCESS {
		panic(ret)
	}
	gii, _ := gi.GetInfo()
	return int(gii.Id)
}

// xid queues an XID event of GPU i.
func (h *mockHost) xid(i int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.events = append(h.events, nvml.EventData{Device: h.gpus[i].dev, EventType: nvml.EventTypeXidCriticalError, EventData: 79})
}
